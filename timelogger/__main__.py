"""``python -m timelogger run -o RUN_DIR -- CMD ...``"""
import sys

from .cli import main

sys.exit(main())
