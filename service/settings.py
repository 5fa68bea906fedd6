"""Service settings: every field is also an environment variable with the ``SPANSEEK_`` prefix.

``SPANSEEK_INDEX=/data/index SPANSEEK_MAX_BATCH_SIZE=64 uvicorn ...`` or ``spanseek serve --index ...``
(the CLI flags mirror these fields). Each field's comment says what it trades off.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict


class Settings(BaseSettings):
    """Configuration of one service process (one model, one index, one micro-batcher)."""

    model_config = SettingsConfigDict(env_prefix="SPANSEEK_", frozen=True, extra="ignore")

    # What to serve. The service refuses an index whose manifest does not match the model.
    index: Path = Field(description="index directory built by `spanseek index build`")
    model: str = Field("default", description="model directory, or 'default' for the bundled model")
    # auto = CUDA when present. bf16 roughly halves encoder time on GPUs / AVX-512 CPUs for a tiny score drift.
    device: str = Field("auto", description="torch device for the question encoder: auto, cpu, cuda, cuda:1")
    precision: Literal["auto", "fp32", "bf16"] = Field("auto", description="question-encoder precision")

    # CPU intra-op threads of the encoder. Fewer than the cores leaves one for the event loop (HTTP parsing, JSON)
    # so batches keep filling at saturation; more speeds up each batch. None = torch's default (all cores).
    torch_threads: int | None = Field(None, ge=1, description="torch intra-op threads (CPU)")

    # Where `spanseek serve` listens. Loopback by default so a laptop run is not exposed; images use 0.0.0.0.
    host: str = Field("127.0.0.1", description="listen address (spanseek serve)")
    port: int = Field(8000, ge=1, le=65535, description="listen port (spanseek serve)")
    # Idle keep-alive before the server closes a connection. Longer than the client's / load balancer's idle
    # timeout (httpx 5 s, AWS ALB 60 s) so the server never closes a connection a client is about to reuse
    # (that race shows up as connection resets under load); costs one idle socket per client.
    keep_alive_s: int = Field(75, ge=1, description="HTTP keep-alive idle timeout (spanseek serve)")

    # Micro-batching. A bigger batch raises throughput (one encoder pass and one faiss call for many questions)
    # but each batch takes longer; a longer wait fills batches at low load at the cost of added latency.
    # At saturation batches fill without waiting, so max_wait_ms only costs latency when traffic is light.
    max_batch_size: int = Field(32, ge=1, le=4096, description="most questions in one encoder/search batch")
    # Pipelining encodes the next batch while the current one is searched (two worker threads). On a GPU host the
    # steps use different hardware, so they always overlap ("on"). On a CPU they share the cores, and overlapping
    # always splits moderate load into two half batches that slow each other; "full" overlaps only when a full
    # batch is waiting. auto = on with a CUDA encoder, full on CPU; off = one thread, one batch at a time.
    pipeline: Literal["auto", "on", "full", "off"] = Field(
        "auto", description="overlap encoding of the next batch with search of the current one: auto, on, full, off"
    )
    max_wait_ms: float = Field(5.0, ge=0, le=10_000, description="longest a question waits for its batch to fill")
    # Queue bound (in questions). Beyond it requests get 429 + Retry-After at once: a small bound keeps latency
    # bounded under overload; a large one absorbs bursts but lets queueing delay grow to max_queue/throughput.
    max_queue: int = Field(256, ge=1, description="most questions waiting to be batched before 429")

    # Request limits. Larger limits let one client take a bigger share of the batcher and of the response size.
    default_top_k: int = Field(10, ge=1, description="hits per query when the request gives no top_k")
    max_top_k: int = Field(100, ge=1, description="largest top_k accepted (400 above); deep k costs search time")
    max_queries_per_request: int = Field(32, ge=1, description="most queries in one request (413 above)")
    # Questions are truncated to the encoder's max_query_len tokens anyway; cutting characters first keeps a
    # megabyte-long query from costing tokenizer time. Longer than any useful question, short of abuse.
    max_query_chars: int = Field(2000, ge=1, description="query characters kept before tokenisation")
    max_body_bytes: int = Field(1 << 20, ge=1024, description="largest request body (413 above)")
    # Longer answers widen span completion (cost ~ L per candidate); the model was trained for its own L.
    max_answer_tokens_limit: int = Field(64, ge=1, description="largest max_answer_tokens accepted")
    # nprobe: inverted lists visited per IVF search. More = better recall, slower search. None = index default.
    default_nprobe: int | None = Field(None, ge=1, description="IVF nprobe when the request gives none")
    max_nprobe: int = Field(4096, ge=1, description="largest nprobe accepted (400 above)")

    # Access. With an API key, /search and /info need `Authorization: Bearer KEY` or `X-API-Key: KEY`; probes and
    # /metrics stay open so orchestrators and Prometheus need no secret (put /metrics behind the network instead).
    api_key: SecretStr | None = Field(None, description="require this key on /search and /info")
    # Browser origins allowed to call the API (comma-separated or JSON list); empty = no CORS headers at all.
    cors_origins: Annotated[list[str], NoDecode] = Field(default_factory=list, description="CORS allowed origins")

    # Warm-up runs every unit once before /ready says yes, so the first user request does not pay for lazy
    # initialisation (allocator, faiss, tokenizer caches). Off only for tests with fake backends.
    warmup: bool = Field(True, description="run warm-up searches before reporting ready")

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _split_origins(cls, v: object) -> object:
        """Accept ``a,b`` or a JSON list from the environment."""
        if isinstance(v, str):
            v = v.strip()
            if v.startswith("["):
                import json

                return json.loads(v)
            return [o.strip() for o in v.split(",") if o.strip()]
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Settings:
        if self.default_top_k > self.max_top_k:
            raise ValueError(f"default_top_k ({self.default_top_k}) exceeds max_top_k ({self.max_top_k})")
        if self.default_nprobe is not None and self.default_nprobe > self.max_nprobe:
            raise ValueError(f"default_nprobe ({self.default_nprobe}) exceeds max_nprobe ({self.max_nprobe})")
        if self.max_queue < self.max_queries_per_request:
            raise ValueError("max_queue must hold at least one full request (max_queries_per_request)")
        return self
