"""The ``kiban`` command line: a client of the HTTP API like any other."""
