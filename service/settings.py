"""Service settings: every field is also an environment variable with the ``SPANSEEK_`` prefix.

``SPANSEEK_INDEX=/data/index SPANSEEK_MAX_BATCH_SIZE=64 spanseek serve`` or ``spanseek serve --index ...``
(the CLI flags mirror these fields). Each field's comment says what it trades off.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from spanseek.core.keys import key_given, key_level, key_problem, read_key_file
from spanseek.indexer.options import DEFAULT_READ_MEMORY, DEFAULT_READ_TIMEOUT_S
from spanseek.indexer.read_process import memory_cap_problem
from spanseek.service.schemas import MAX_QUERIES

# A CORS origin as browsers send it: scheme://host[:port], no path (a trailing slash never matches)
ORIGIN = re.compile(r"[a-zA-Z][a-zA-Z0-9+.-]*://[^/\s?#]+")


KEY_SETTINGS = (("api_key", "api_key_file"), ("admin_api_key", "admin_api_key_file"))


class KeysGivenAbove(PydanticBaseSettingsSource):
    """A settings source (the environment's) less the keys a source above it gave: a key and its file are one
    setting, so ``--api-key-file`` overrides ``SPANSEEK_API_KEY`` as ``--api-key`` does (flags over the environment
    over the defaults, as for every setting), rather than the two meeting as a key given both ways."""

    def __init__(self, source: PydanticBaseSettingsSource):
        super().__init__(source.settings_cls)
        self.source = source
        self.__name__ = type(source).__name__  # its name in pydantic-settings' record of each source's values

    def _set_current_state(self, state: dict[str, Any]) -> None:
        super()._set_current_state(state)
        self.source._set_current_state(state)

    def _set_settings_sources_data(self, states: dict[str, dict[str, Any]]) -> None:
        super()._set_settings_sources_data(states)
        self.source._set_settings_sources_data(states)

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self.source.get_field_value(field, field_name)

    def __call__(self) -> dict[str, Any]:
        values = self.source()
        for pair in KEY_SETTINGS:
            if any(key_given(self.current_state.get(name)) for name in pair):
                values = {name: value for name, value in values.items() if name not in pair}
        return values


class Settings(BaseSettings):
    """Configuration of one service process (one model, one index, one micro-batcher)."""

    # allow_inf_nan off: "inf" or "nan" in a limit or timeout is refused rather than meaning "never" (an infinite
    # Retry-After is a 500, an infinite header timeout turns the slow-client protection off, /info shows null)
    model_config = SettingsConfigDict(env_prefix="SPANSEEK_", frozen=True, extra="ignore", allow_inf_nan=False)

    # What to serve. The service refuses an index whose manifest does not match the model.
    index: Path = Field(description="index directory built by `spanseek index build`, or an alias of one (a "
                                    "symlink or a pointer file naming it; `spanseek index switch`)")
    # Seconds between checks of the index path: when its alias points elsewhere or its manifest is rewritten, the
    # new index is loaded next to the old one and swapped in (memory for both meanwhile). Each check is two stats;
    # 0 = only POST /admin/reload swaps.
    index_poll_s: float = Field(0.0, ge=0, description="seconds between checks for a switched index alias (0 = off)")
    model: str = Field("default", description="model directory, or a bundled model: default, base, default-2026-11")
    # Requests with "read": true have their top passages read by this cross-attention reader: more often the exact
    # answer, at a reader forward pass per passage read. Loading it costs ~90 MB of memory; None = no reading (400).
    reader: str | None = Field(None, description="reader directory, or 'default' for the bundled reader, for "
                                                 "requests with read (none: read is refused)")
    reader_precision: Literal["auto", "fp32", "bf16"] = Field("auto", description="reader precision")
    # Reading as the server's default, for clients that do not ask: more often the exact answer for every client,
    # at the reader's cost (about 10x a plain search; read_below reads only the questions the search is unsure of).
    default_read: bool = Field(False, description="requests that do not give read are read (needs reader); not "
                               "those that reading would refuse: that collapse duplicates, which reading does not "
                               "do, or that would read more than max_passages_read (answered unread, with a warning)")
    default_read_below: float | None = Field(
        None, ge=0, le=1, description="read_below of requests with read (asked or by default_read) that give none: "
        "only questions whose best hit without read is less confident than this are read (needs reader; where the "
        "model has no calibration for a request's unit and mode, its questions are all read)")
    # auto = CUDA when present. bf16 roughly halves encoder time on GPUs / AVX-512 CPUs for a tiny score drift.
    device: str = Field("auto", description="torch device for the question encoder: auto, cpu, cuda, cuda:1")
    precision: Literal["auto", "fp32", "bf16"] = Field("auto", description=(
        "question-encoder precision: auto = bf16 on a GPU with bf16, on a CPU with AMX and on an AMD CPU with "
        "AVX-512 bf16, else fp32 (by the CPU's features, not a timing: the same in every process)"))
    # What runs the encoder's and the reader's forward passes: auto = ONNX Runtime in fp32 on a CPU (one question
    # encodes 3.7x faster than on torch, a batch of 64 1.25x; the graphs are exported once per model into
    # ~/.cache/spanseek/onnx), torch on GPUs; in bf16 on a CPU (AMX) every question and reader pass still on ONNX
    # Runtime, so that a question's vectors and read scores do not depend on its batch (core.runtime.every_pass).
    runtime: Literal["auto", "torch", "onnx"] = Field("auto", description="auto, torch or onnx: forward passes on "
                                                                        "ONNX Runtime (CPU, fp32) or torch")
    # Where the token index is searched and span completion scores: auto follows the encoder onto a GPU (the
    # index, or its coarse quantiser, and the fine vectors go to GPU memory when they fit; see core.gpu).
    search_device: str = Field("auto", pattern=r"^(auto|cpu|cuda(:\d+)?)$",
                               description="where the token index is searched: auto, cpu, cuda, cuda:1")

    # CPU intra-op threads of the encoder. Fewer than the cores leaves one for the event loop (HTTP parsing, JSON)
    # so batches keep filling at saturation; more speeds up each batch. None = torch's default (all cores). At most
    # 1024: torch takes any count (10^11 failed the loading with an overflow, after the server had started).
    torch_threads: int | None = Field(None, ge=1, le=1024, description="torch intra-op threads (CPU)")

    # Where `spanseek serve` listens. Loopback by default so a laptop run is not exposed; images use 0.0.0.0.
    host: str = Field("127.0.0.1", description="listen address (spanseek serve)")
    port: int = Field(8000, ge=1, le=65535, description="listen port (spanseek serve)")
    # Reverse proxies in front of the service whose X-Forwarded-For (and X-Forwarded-Proto) it believes: the client
    # address the access log, fair shares and refusals go by is then the one the proxy says, not the proxy's. Empty
    # (the default) believes no one, so no client can choose the address it is counted under by sending the header;
    # uvicorn's own default believed any local process (127.0.0.1). Name only proxies that set the header themselves.
    forwarded_allow_ips: Annotated[list[str], NoDecode] = Field(default_factory=list, description=(
        "addresses of reverse proxies whose X-Forwarded-For the service believes: IP addresses or networks "
        "(10.0.0.0/8), comma-separated, or * for any peer; empty = none: the client is the connection's peer "
        "(spanseek serve)"))
    # Idle keep-alive before the server closes a connection (with no word: HTTP/1.1 has none to send). Longer than
    # the clients' pools' and load balancers' idle timeouts (httpx 5 s, aiohttp 15 s, AWS ALB and nginx 60 s; Google
    # Cloud's load balancers 600 s: 620 there) so the server never closes a connection a client is about to reuse:
    # that race loses the request ("Server disconnected without sending a response", resets; at a 5 s keep-alive,
    # 2 in 200 httpx reuses within 5 ms of it). Costs one idle socket per client.
    keep_alive_s: int = Field(75, ge=1, description="seconds an idle kept-alive connection stays open: longer than "
                                                    "clients' and load balancers' idle times (httpx 5, aiohttp 15, "
                                                    "AWS ALB 60) (spanseek serve)")
    # A connection that has not sent a complete request head within header_timeout_s (from connecting, or from
    # the end of its previous response) is closed, and a request whose body has not fully arrived within
    # body_timeout_s gets 408 and its connection closed: half-sent requests (slow or stalled clients, slowloris)
    # cannot hold sockets forever. Too short cuts off clients on slow links; bodies are at most max_body_bytes
    # (max_file_bytes for a file to /files/: at 30 s, a 32 MiB file needs about 9 Mbit/s).
    header_timeout_s: float = Field(10.0, gt=0, description="seconds to receive a request's headers (spanseek serve)")
    # body_timeout_s runs from the request's first byte whether or not the route reads the body: a request that
    # answers early (401, 404, 413, 429, /health) and leaves the body unread has its connection closed once the
    # answer is sent (after a short linger) or at that deadline, so a trickled body cannot hold a socket.
    body_timeout_s: float = Field(30.0, gt=0, description="seconds from a request's first byte to the last byte of "
                                                          "its body (408, and the connection closed, after)")
    # A client that does not read its answer: its connection is aborted when the answer has not drained for this
    # long, so unread answers cannot pin memory. Too short cuts off clients on slow links reading big answers.
    write_timeout_s: float = Field(30.0, gt=0, description="seconds an answer may wait for the client to read it "
                                                           "before the connection is aborted (spanseek serve)")
    # Log lines: text for a terminal; json (one object per line with time, level, logger, message and request_id;
    # access lines add method, path, status and duration_ms) for a log pipeline, at the cost of longer lines.
    log_format: Literal["text", "json"] = Field("text", description="log lines: text, or json (one JSON object per "
                                                                    "line) (spanseek serve)")

    # Micro-batching. A bigger batch raises throughput (one encoder pass and one faiss call for many questions)
    # but each batch takes longer; a longer wait fills batches at low load at the cost of added latency.
    # At saturation batches fill without waiting, so max_wait_ms only costs latency when traffic is light; the
    # default takes whatever is queued once the batcher is free (requests arriving during a batch form the next),
    # which on a 2-core CPU host answered single requests 7 ms sooner and kept p99 at moderate load no higher.
    # Every accepted request may wait behind a whole batch and then run in one, so the batch time bounds latency
    # under overload: 16 keeps it under 2 s on a 2-core CPU host at about the same throughput as 32.
    max_batch_size: int = Field(16, ge=1, le=4096, description="most questions in one encoder/search batch")
    # Pipelining encodes the next batch while the current one is searched (two worker threads). On a GPU host the
    # steps use different hardware, so they always overlap ("on"). On a CPU they share the cores, and overlapping
    # always splits moderate load into two half batches that slow each other; "full" overlaps only when a full
    # batch is waiting. auto = on with a CUDA encoder, full on CPU; off = one thread, one batch at a time.
    pipeline: Literal["auto", "on", "full", "off"] = Field(
        "auto", description="overlap encoding of the next batch with search of the current one: auto, on, full, off"
    )
    max_wait_ms: float = Field(0.0, ge=0, le=10_000, description="longest a question waits for its batch to fill")
    # Load shedding by expected waiting time: a request is refused (429 + Retry-After) when the batch it would join
    # would start later than this, at the batch rate measured on recent batches (the batches in flight plus the
    # full batches queued ahead of it; questions that share its batch are not ahead of it), and at least one full
    # batch is queued ahead of it (one that joins the next batch is always taken). A small budget keeps
    # accepted requests fast under overload (latency ~ budget + its own batch) but refuses more of a sustained
    # overload; a burst at an idle server of up to max_queries_per_request questions is admitted whole.
    # Retry-After counts whole seconds, so a client told to retry comes back a second later at the earliest: under a
    # second, the budget refuses requests that queueing would answer sooner (lower it where a load balancer sends
    # the refused request to another replica at once). 0 turns it off (only max_queue sheds).
    max_queue_wait_ms: float = Field(
        1000.0, ge=0, le=600_000, description="refuse requests whose expected queueing time exceeds this (429)"
    )
    # Hard queue bound (in questions), whatever the measured rate says: a small bound caps memory and latency
    # even before a rate is measured; a large one absorbs bursts but lets queueing delay grow to max_queue/throughput.
    # The default holds a request of the most queries read at the bundled reader's default (about 300: service.cost).
    max_queue: int = Field(512, ge=1, description="most question-equivalents waiting to be batched before 429")
    # Fair shares: batches take waiting requests in fair-queueing order by cost, so a client queueing much work (or
    # expensive work) is overtaken by the others and refused first, and no client may hold more than an equal share
    # of max_queue among those waiting. connection = each TCP connection is a client (clients on one host or behind
    # one NAT kept apart, but a client opening many connections gets many shares); peer = each address (behind a
    # proxy, every client shares the proxy's).
    # Clients that wait for each answer are never backlogged, so between their answer and their next request only a
    # heavy client's work is queued: a batch of work ahead of its fair turn waits this long for clients in flight or
    # just answered to ask again (their requests go first). Longer catches slower clients, and delays the heavy
    # work more when they do not come back; 0 = run whatever is queued at once.
    fair_wait_ms: float = Field(50.0, ge=0, le=1000, description="how long work ahead of its fair turn waits for "
                                                                 "clients just answered to ask again")
    fair_share_by: Literal["connection", "peer"] = Field(
        "connection", description="who gets a fair share of the queue: each connection, or each peer address")
    # The most work one request may ask, in question-equivalents (service.cost: a phrase question at the default
    # top_k is 1; a document search whose offset + top_k reaches every document of the index 70): 400 above. Higher
    # lets one request hold the batcher longer, delaying everyone's answers; the default admits two requests of the
    # most queries (max_queries_per_request) at the default depth.
    max_request_cost: float = Field(64.0, ge=1, description="most question-equivalents one request's search may "
                                                            "cost, its reading apart (400 above)")
    # Reading is bounded apart, in passages read (a request's questions x read_passages): a read passage costs about
    # three unread questions (service.cost), so the search's limit would refuse read requests of a few questions.
    # Higher lets one request queue more reading (served in parts between other clients' work); None = a request
    # of the most queries (max_queries_per_request) at the reader's default read_passages.
    max_passages_read: int | None = Field(None, ge=1, description="most passages one request may have read "
                                          "(questions x read_passages; 400 above); default: max_queries_per_request "
                                          "x the reader's default read_passages")

    # Request limits. Larger limits let one client take a bigger share of the batcher and of the response size.
    default_top_k: int = Field(10, ge=1, description="hits per query when the request gives no top_k")
    max_top_k: int = Field(100, ge=1, description="largest top_k accepted (400 above); deep k costs search time")
    max_offset_top_k: int = Field(
        200, ge=1, description="largest offset + top_k accepted (400 above): a page is cut from a ranking that deep, "
        "so deep pages cost search time like a large top_k")
    max_queries_per_request: int = Field(32, ge=1, le=MAX_QUERIES,
                                         description="most queries in one request (413 above)")
    # Questions are truncated to the encoder's max_query_len tokens anyway; cutting characters first keeps a
    # megabyte-long query from costing tokenizer time. Longer than any useful question, short of abuse.
    max_query_chars: int = Field(2000, ge=1, description="query characters kept before tokenisation")
    max_body_bytes: int = Field(1 << 20, ge=1024, description="largest request body (413 above)")
    # Bounded responses. A hit carries this many characters of its passage on each side of the phrase (cut at a
    # word edge) unless the request asks for full_passage: more context costs response bytes per hit.
    passage_context_chars: int = Field(200, ge=0, description="passage characters around the phrase in each hit")
    # The largest answer body; a request whose answer would be larger gets 400 response_too_large. With the
    # default context, 32 queries x top_k 100 of ordinary passages fit; whole passages of a huge corpus may not.
    max_response_bytes: int = Field(4 << 20, ge=4096, description="largest /search response body (400 above)")
    # Longer answers widen span completion (cost ~ L per candidate); the model was trained for its own L.
    max_answer_tokens_limit: int = Field(64, ge=1, description="largest max_answer_tokens accepted")
    # nprobe: inverted lists visited per IVF search. More = better recall, slower search. None = index default.
    default_nprobe: int | None = Field(None, ge=1, description="IVF nprobe when the request gives none")
    # At most 2^24: more lists than any index has (faiss visits at most all of them); faiss refuses an nprobe past 2^64.
    max_nprobe: int = Field(4096, ge=1, le=1 << 24, description="largest nprobe accepted (400 above)")
    # Each passage read costs a reader forward pass (a few ms on a CPU core): bounds one question's reading.
    max_read_passages: int = Field(20, ge=1, le=64, description="largest read_passages accepted (400 above)")
    # Each distinct filter's selection (allowed documents and passages) is kept for the next request with it: about
    # D + 1.125 P bytes each (D documents, P passages), plus the filter itself (a filter of 10,000 ids is about
    # 1.2 MB) and 1 KB; all of it is counted. More = fewer selections computed again, more memory.
    selection_cache_bytes: int = Field(1 << 30, ge=0, description="bytes of recent filters' selections kept")
    # A question asked again (the next page, a retry) reuses its first vectors: the same hits whatever it was batched
    # with, and no encoder pass (core.encoding.QuestionCache). About 3 KB a question with the default model.
    question_cache: int = Field(16384, ge=0, description="questions whose vectors are kept for when they are asked "
                                "again (0: off)")
    # A search whose rank_window is deeper than its page keeps the rest of each question's ranking for its next pages
    # (the result's next cursor): those pages cost no search and follow the first exactly, whatever is written or
    # reloaded meanwhile. Longer or more = cursors that live longer, more memory (a hit is about 1 KB plus its passage).
    cursor_ttl_s: float = Field(300.0, ge=0, description="seconds a paging cursor's ranking is kept after its last "
                                "page (0: no cursors)")
    cursor_cache_bytes: int = Field(64 << 20, ge=0, description="bytes of paging cursors' rankings kept, the least "
                                    "recently paged dropped first (0: no cursors)")
    # On CPUs other than Intel's an exact index's scans multiply by a transposed copy of its vectors (core.flat_search):
    # faster, and as much RAM again as the vectors.
    scan_transposed_bytes: int = Field(1 << 30, ge=0, description=(
        "largest exact index (bytes of float32 vectors) whose scans keep a transposed copy on CPUs other than "
        "Intel's: faster, as much RAM again; 0: never"))
    # On CPUs with AVX-512 BF16 but not FP16 (AMD Zen 4) small batches' scans screen with a bf16 copy of an exact
    # index's vectors (core.bf16_scan): faster, half as much RAM again as the vectors.
    scan_bf16_bytes: int = Field(1 << 30, ge=0, description=(
        "largest exact index (bytes of float32 vectors) whose scans keep a bf16 copy to screen batches of 4-16 "
        "questions with, on CPUs with AVX-512 BF16 but not FP16: the same hits, faster, half as much RAM again; 0: "
        "never"))
    unanswerable_prior: float = Field(0.0, ge=0.0, le=1.0, description=(
        "share of questions expected to have no answer in the index (0-1), assumed by hits' confidence when a "
        "request does not say (unanswerable_prior)"))

    # Access. With an API key, /search and /info need `Authorization: Bearer KEY` or `X-API-Key: KEY`; probes and
    # /metrics stay open so orchestrators and Prometheus need no secret (put /metrics behind the network instead).
    # An empty (or blank) value means no key, as when compose passes an unset variable: every client is accepted,
    # including those that send a key anyway.
    api_key: SecretStr | None = Field(None, description="require this key on /search, /info, GET /documents and /admin/reload (empty = no key)")
    # A key on the command line is in the process's arguments, which `ps` shows every user of the machine; the
    # environment or a file readable by its owner only is not. The file is read once, when the settings are made.
    api_key_file: Path | None = Field(None, description="file holding api_key, read once at start (its one line; "
                                                        "chmod 600), or a pipe (<(pass show KEY)): keeps the key out "
                                                        "of the command line")
    # Browser origins allowed to call the API (comma-separated or JSON list); empty = no CORS headers at all.
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list, description="CORS allowed origins")

    # POST /admin/reload loads and checksums the whole index and holds two copies in memory until the swap: it needs
    # the admin key where one is set, else the API key (without either it is off: switch the alias with index_poll_s
    # set, or send SIGHUP), concurrent requests share one reload, and a reload finished less than this long ago is
    # answered 429 with Retry-After.
    reload_min_interval_s: float = Field(30.0, ge=0, description="least seconds between two reloads on request")
    # A refused POST /admin/reload (401, 403, 429) is answered after this long, so a client repeating it without
    # back-off cannot take the cores from the searches; longer slows a legitimate caller's retry too.
    reload_refusal_delay_s: float = Field(1.0, ge=0, description="seconds before a refused POST /admin/reload is "
                                                                 "answered")
    # Access lines: at most this many a second (then one line says how many were left out); refusals under overload
    # (429) get none, they are counted in spanseek_errors_total. 0 = no limit.
    access_log_per_s: float = Field(50.0, ge=0, description="most access log lines a second (0 = no limit)")

    # Live writes (PUT /documents, DELETE /documents/{id}, POST /documents/delete, GET /documents/{id}). On, the
    # service keeps the phrase encoder's passage side busy between search batches (each write is encoded in chunks
    # of write_chunk_tokens tokens in the encoder's thread), a write-ahead log fsynced per write and a segment in
    # memory (its token vectors, 768 B a token at d 384); each write rebuilds the searched snapshot's maps (O(base
    # passages + tokens), milliseconds for the demo index). Off, the index is read-only as before.
    writes: bool = Field(False, description="accept document writes over HTTP (needs an API key)")
    # One server writes to a live directory (its writer lock). On, a second one started over it waits, not ready, and
    # takes over the writes once the first stops (a standby, or a container scaled by mistake that does not exit and
    # get restarted over and over); off, it is refused at start (status 2). The standby holds no memory meanwhile:
    # it loads the model and the index once it has the lock.
    writes_standby: bool = Field(False, description="with writes, when another server writes to the live directory: "
                                                    "wait for it to stop and take over, instead of exiting")
    # The live directory holds the log, the merged bases and state.json; it must be on a writable volume.
    live_dir: Path | None = Field(None, description="directory of the write-ahead log and merged bases (default: "
                                                    "the index path + '.live')")
    # Writes and POST /admin/reload need this key when it is set (the API key then only reads); without it they need
    # the API key.
    admin_api_key: SecretStr | None = Field(None, description="key for writes and /admin routes (empty = the API "
                                                              "key does both)")
    admin_api_key_file: Path | None = Field(None, description="file holding admin_api_key, read once at start (its "
                                                              "one line; chmod 600)")
    # A merge re-encodes the segment's documents into a copy of the base and compacts it: CPU for the segment's
    # size, disk for a second base meanwhile. Larger segments cost memory and snapshot time per write.
    merge_tokens: int = Field(200_000, ge=0, description="segment tokens that start a background merge (0 = only "
                                                         "POST /admin/compact, whatever the other merge_ settings)")
    # Replacing or deleting documents adds little to the segment but fills the log (replayed at every start) and
    # masks base documents (searched, then dropped): either also starts a merge.
    merge_log_bytes: int = Field(256 << 20, ge=0, description="write log size that starts a background merge "
                                                              "(0 = never for its size)")
    merge_deleted_share: float = Field(0.25, ge=0, le=1, allow_inf_nan=False, description=(
        "share of the base's documents deleted or replaced that starts a background merge (0 = never for it)"))
    # The merge thread (and the encoder and faiss threads it starts) runs at this niceness above the service's, so
    # searches and writes keep the cores while it works; a merge then takes longer on a busy machine. 0 = same
    # priority; 19 = only idle time.
    merge_nice: int = Field(10, ge=0, le=19, description="how much lower the CPU priority of a background merge is "
                                                       "(nice increment; Linux)")
    # Smaller chunks let search batches run sooner between them (less search latency under writes), at more
    # encoder calls per document.
    write_chunk_tokens: int = Field(512, ge=16, description="tokens encoded per step of a write, between search "
                                                            "batches")
    # With write_nice 0, a write step runs when no search is queued or running; under continuous search load it runs once it has
    # waited this long, between two batches (the next batch waits for that one step). Longer: searches are held up
    # by a write step less often, and a write under load takes longer (about one step of write_chunk_tokens per
    # write_wait_ms). 0 = a step runs as soon as the encoder's thread is free, taking turns with every batch.
    # A write's tokenising and forward passes run in a thread of their own at this niceness above the service's, a
    # step at a time beside search batches: the kernel gives the cores to searches first and the write the rest, so
    # a searching client is not held behind a write step. Measured (2-core AMD EPYC, docs/service.md): during a sync
    # of 20 files a client's search p50 was 0.8-1.0x its p50 alone at 5, 2.5-3.6x in the encoder's thread (0), and
    # the syncs took 1.3x as long.
    # Higher: searches keep more of the cores, writes take longer on a busy machine. 0 = the steps take turns with
    # search batches in the encoder's thread (write_wait_ms).
    write_nice: int = Field(5, ge=0, le=19, description="how much lower the CPU priority of a write's encoding is, in "
                                                        "a thread of its own beside searches (nice increment; Linux; "
                                                        "0: in the encoder's thread, taking turns with search "
                                                        "batches)")
    write_wait_ms: float = Field(0.0, ge=0, le=60_000, description="longest a write step waits for a gap in the "
                                                                      "searches before it runs between two batches")

    # A written document's title comes back with every hit of the document and is searched with each of its passages
    # (the lexical leg): a megabyte of title cost every one of them a megabyte. Longer than any real title.
    max_title_chars: int = Field(1000, ge=1, description="longest title of a document written with PUT/POST "
                                                         "/documents or /files/{name} (422 above)")

    # A file written with PUT/POST /files/{name} is taken whole in memory and read (PDF, Word, HTML, Markdown,
    # text) in a process of its own (service.file_reader), one file at a time; larger files cost memory and that
    # process's time.
    max_file_bytes: int = Field(32 << 20, ge=1024, description="largest file body of PUT/POST /files/{name} (413 "
                                                               "above)")
    # A file's tokens are what encoding it costs (a write of 215k tokens took 107 s on 2 CPU cores, its chunks taking
    # turns with search batches all along). A 300-page book is about 120k tokens (90k words); the default takes four
    # of them in one file and refuses (413) a 32 MiB text file (some 7M tokens, an hour of encoding). 0 = no limit.
    max_file_tokens: int = Field(500_000, ge=0, description="most model tokens in one file of PUT/POST "
                                                            "/files/{name} (413 above, before encoding; 0 = no limit)")
    # The same bound on the documents of one write of PUT/POST /documents, counted (a step at a time, between search
    # batches) before any is encoded: a body of max_body_bytes may hold a token a byte (a megabyte of punctuation is
    # 1M tokens, some 8 minutes of encoding on 2 CPU cores), past what max_body_bytes suggests. 0 = no limit.
    max_write_tokens: int = Field(500_000, ge=0, description="most model tokens in the documents of one PUT/POST "
                                                             "/documents (413 above, before encoding; 0 = no limit)")
    # Files are read in a process of their own at this niceness above the service's, so reading (pure Python for a
    # PDF) takes the cores only when searches leave them; a file is then read more slowly on a busy machine.
    file_nice: int = Field(10, ge=0, le=19, description="how much lower the CPU priority of the process that reads "
                                                        "uploaded files is (nice increment; Linux)")
    # Uploads read or encoded at once (a slot is taken once a body is in); the bodies held in memory, those still
    # arriving included, come to at most max_file_uploads x max_file_bytes. More are answered 429 with Retry-After,
    # so a burst queues at its clients instead of in the server's memory, and a slow client holds only its bytes.
    max_file_uploads: int = Field(4, ge=1, description="most PUT/POST /files/{name} in progress at once (429 "
                                                       "above)")
    # A file the reader takes longer than this over (a reader stuck on a hostile or damaged file) is refused (422)
    # and its reader replaced: a hung reader held its upload slot for good, and with every slot held, all uploads.
    file_read_timeout_s: float = Field(DEFAULT_READ_TIMEOUT_S, gt=0, description="seconds an uploaded file may take to read (422 "
                                                                "above; the reader process is replaced)")
    # The memory the process that reads uploaded files may take (its data: heap and private mappings; Linux), so that
    # a file taking much of it to read is refused (413) rather than bringing in the kernel's OOM killer, which may pick
    # the server. Reading takes many times a file's size (a 30 MiB HTML page of 1.5M table cells took 5.9 GB, refused
    # after 52 s at the default); the process itself holds some 110 MB. 0 = no limit.
    file_read_memory_bytes: int = Field(DEFAULT_READ_MEMORY, ge=0, description="most memory the process that reads uploaded "
                                                                   "files may take (413 for a file that needs more; "
                                                                   "the process is replaced; 0 = no limit)")
    # What a file's reading may leave the reading process holding, above what it held before its first file: its
    # allocator keeps part of what a large file took (a 9.8 MiB HTML table: 1,088 MB, 196 MB once trimmed), so past
    # this the process is replaced and the next upload starts a fresh one (about 1 s, ~68-80 MB). 0 = keep it.
    file_read_keep_bytes: int = Field(64 << 20, ge=0, description="memory a read may leave the process that reads "
                                                                  "uploaded files holding above what it held before "
                                                                  "its first file; past it, the process is replaced "
                                                                  "(0 = never)")

    # Warm-up runs every unit once before /ready says yes, so the first user request does not pay for lazy
    # initialisation (allocator, faiss, tokenizer caches). Off only for tests with fake backends.
    warmup: bool = Field(True, description="run warm-up searches before reporting ready")

    @field_validator("cors_origins", "forwarded_allow_ips", mode="before")
    @classmethod
    def _split_list(cls, v: object, info: ValidationInfo) -> object:
        """Accept ``a,b`` or a JSON list from the environment."""
        if isinstance(v, str):
            v = v.strip()
            if v.startswith("["):
                import json

                try:
                    return json.loads(v)
                except json.JSONDecodeError as e:
                    items = "origins" if info.field_name == "cors_origins" else "addresses"
                    raise ValueError(f"not a JSON list of {items} ({e}); or give them comma-separated") from None
            return [o.strip() for o in v.split(",") if o.strip()]
        return v

    @field_validator("cors_origins")
    @classmethod
    def _origins(cls, v: list[str]) -> list[str]:
        """An origin is ``scheme://host[:port]`` as browsers send it (or ``*``): one with a path or a trailing slash
        would never match, and every cross-origin call would fail without saying why."""
        for origin in v:
            if origin != "*" and not ORIGIN.fullmatch(origin):
                raise ValueError(f"{origin!r} is not an origin: scheme://host[:port] with no path or trailing slash "
                                 "(https://app.example.com), or *")
        return v

    @field_validator("forwarded_allow_ips")
    @classmethod
    def _proxy_addresses(cls, v: list[str]) -> list[str]:
        """Each entry is an IP address or network, or ``*`` alone: uvicorn takes anything else (a host name, a typo,
        a network with host bits set, ``*`` beside an address) as a name no peer has, and believed nobody without a
        word."""
        if "*" in v and len(v) > 1:
            raise ValueError("* (believe any peer) stands alone; give it or a list of addresses, not both")
        for entry in v:
            if entry == "*":
                continue
            try:
                ipaddress.ip_network(entry) if "/" in entry else ipaddress.ip_address(entry)
            except ValueError as e:
                raise ValueError(f"{entry!r} is not an IP address or network (10.0.0.5, 10.0.0.0/8, fd00::/8) nor *: "
                                 f"{e}") from None
        return v

    @field_validator("*", mode="before")
    @classmethod
    def _empty_is_unset(cls, v: object, info: ValidationInfo) -> object:
        """An empty (or blank) optional setting, any whose default is None, is unset, as compose passes an unset
        variable (``SPANSEEK_READER=`` was the reader directory ``.``, ``SPANSEEK_LIVE_DIR=`` the working directory,
        ``SPANSEEK_MAX_PASSAGES_READ=`` a refusal to start)."""
        field = cls.model_fields[info.field_name] if info.field_name else None
        optional = field is not None and not field.is_required() and field.default is None
        return None if optional and isinstance(v, str) and not v.strip() else v

    @field_validator("index", "model", "host", "device", mode="before")
    @classmethod
    def _not_empty(cls, v: object) -> object:
        """An empty required setting is refused: ``SPANSEEK_INDEX=`` was the working directory, and ``SPANSEEK_HOST=``
        listened on every interface (asyncio's meaning of an empty host), not on loopback."""
        if isinstance(v, str) and not v.strip():
            raise ValueError("must not be empty")
        return v

    @field_validator("api_key", "admin_api_key", mode="before")
    @classmethod
    def _empty_key_is_none(cls, v: object) -> object:
        """``SPANSEEK_API_KEY=`` (empty or blank) turns authentication off rather than requiring an empty key."""
        raw = v.get_secret_value() if isinstance(v, SecretStr) else v
        if isinstance(raw, str) and not raw.strip():
            return None
        if isinstance(raw, str) and (problem := key_problem(raw)) is not None:  # $(cat file) with its line end
            raise ValueError(problem)
        return v

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource,
                                   dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource,
                                   ) -> tuple[PydanticBaseSettingsSource, ...]:
        """pydantic-settings' sources in its order (arguments, the environment), each below the arguments less the
        keys given above it (``KeysGivenAbove``)."""
        return init_settings, *(KeysGivenAbove(s) for s in (env_settings, dotenv_settings, file_secret_settings))

    @model_validator(mode="before")
    @classmethod
    def _keys_from_files(cls, data: object) -> object:
        """``api_key_file`` and ``admin_api_key_file``: the key read from the file (once, here), as if given itself.
        Only the highest level that gives a key or its file is here (``KeysGivenAbove``): a key and its file both
        given at that level are refused (which one was meant?), as is a file that holds no usable key."""
        if not isinstance(data, dict):
            return data
        for name, file_name in KEY_SETTINGS:
            _, path = key_level([("at one level (both as flags, or both as environment variables)", data.get(name),
                                  data.get(file_name))], name, file_name)
            if path is None:
                continue
            try:
                data = {**data, name: read_key_file(str(path))}
            except ValueError as e:
                raise ValueError(f"{file_name}: {e}") from None
        return data

    @field_validator("file_read_memory_bytes")
    @classmethod
    def _reader_memory(cls, v: int) -> int:
        """A limit the reading process can start under (``indexer.read_process``, whose bound from-files' flag shares)."""
        if (problem := memory_cap_problem(v)) is not None:
            raise ValueError(problem)
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.default_top_k > self.max_top_k:
            raise ValueError(f"default_top_k ({self.default_top_k}) exceeds max_top_k ({self.max_top_k})")
        if self.default_nprobe is not None and self.default_nprobe > self.max_nprobe:
            raise ValueError(f"default_nprobe ({self.default_nprobe}) exceeds max_nprobe ({self.max_nprobe})")
        if self.max_queue < self.max_queries_per_request:
            raise ValueError("max_queue must hold at least one full request (max_queries_per_request)")
        if self.max_batch_size > self.max_queue:  # the warm-up would also time batches that never happen
            raise ValueError(f"max_batch_size ({self.max_batch_size}) exceeds max_queue ({self.max_queue}): batches "
                             "are cut from the queue, so none could be that large")
        if self.max_top_k > self.max_offset_top_k:
            raise ValueError(f"max_top_k ({self.max_top_k}) exceeds max_offset_top_k ({self.max_offset_top_k}): a top_k "
                             "above max_offset_top_k is refused even at offset 0")
        if self.max_request_cost < self.max_queries_per_request:  # every question costs at least 1 (service.cost)
            raise ValueError(f"max_request_cost ({self.max_request_cost:g}) is below max_queries_per_request "
                             f"({self.max_queries_per_request}): a request of that many questions would always be "
                             "refused for its cost")
        # default_read_below 0 is set (it reads no question), though 0 == False
        asked = [name for name, on in (("default_read", self.default_read),
                                       ("default_read_below", self.default_read_below is not None)) if on]
        if asked and self.reader is None:
            raise ValueError(f"{' and '.join(asked)} {'needs' if len(asked) == 1 else 'need'} a reader (reader: "
                             "default for the bundled one)")
        if self.writes and self.api_key is None and self.admin_api_key is None:
            raise ValueError("writes need a key (admin_api_key or api_key): without one every write is refused (403)")
        return self
