"""Helpers shared by the test modules (no tests here): fixtures stay in ``tests/conftest.py``, and no test module
imports another. Imported as ``tests.helpers.<topic>`` (the repository root is on ``sys.path`` under
``python -m pytest``)."""
import pkgutil

import pytest

# pytest rewrites their asserts, as it does a test module's, for its failure messages: registered before they load
pytest.register_assert_rewrite(*(f"{__name__}.{m.name}" for m in pkgutil.iter_modules(__path__)))
