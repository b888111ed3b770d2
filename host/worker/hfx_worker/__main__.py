"""`python -m hfx_worker`: the request loop (the host starts it with `-c`, same thing)."""

from .server import main

main()
