"""Replay: re-run one captured kernel in isolation under any pipeline, checked
against the recording (``server.ReplayServer`` is the API)."""
