"""Training of the phrase and question encoders (see trainer.train)."""

if __name__ != "spanseek.trainer":  # one import root: never a top-level `trainer` that shadows users' own modules
    raise ImportError(f"this is spanseek.trainer; import it as `spanseek.trainer`, not as `{__name__}`")
