"""``python -m rllm_plugins``: the ``rllm-plugins`` command."""

from .cli import main

if __name__ == "__main__":
    raise SystemExit(main())
