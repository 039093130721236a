# The native scanner's interface (_pfwscan.c): for mypy, which does not read the compiled module.
from typing import Optional, Union

from typing_extensions import TypeAlias, Unpack

_Buffer: TypeAlias = Union[bytes, bytearray, memoryview]
#: a column: (validity bitmap, null count, its buffers: values; offsets and data; or indices, offsets and data)
_Column: TypeAlias = tuple[bytes, int, Unpack[tuple[bytes, ...]]]

def newlines(text: _Buffer) -> int: ...
def scan(body: _Buffer, top_fields: tuple[tuple[bytes, int], ...], arg_fields: tuple[tuple[bytes, int], ...],
         max_line: int) -> Optional[tuple[int, list[_Column], bytes, int, list[_Column]]]: ...
