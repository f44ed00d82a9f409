"""Images: encoding with mtmd, the vision runtime, and VLMOpt planning."""
