"""Training of the phrase and question encoders (see trainer.train)."""
