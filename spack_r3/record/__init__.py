"""Record: build with r3-record, run, collect captures."""
