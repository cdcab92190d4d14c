"""goodhart_prof/trace/file_bytes.py: a trace file's bytes. Gzip told by its bytes (not its name),
several members joined, padding allowed; truncated, corrupt and over-limit gzip data refused as
DecodeErrors; the expansion limit; a file that changes while it is read (FileChanged)."""
from __future__ import annotations

import gzip
import os

import pytest

from goodhart_prof.trace.decode import DecodeError
from goodhart_prof.trace.file_bytes import (GUNZIP_FLOOR, FileChanged, gunzip, gunzip_limit, inflate_chunks,
                                            read_all, read_bytes, same_file)


def test_gzip_members_are_joined_and_padding_after_them_is_allowed():
    data = gzip.compress(b"abc") + gzip.compress(b"def")
    assert bytes(gunzip(data, 100)) == b"abcdef"
    assert bytes(gunzip(data + b"\0\0\0", 100)) == b"abcdef"
    assert gunzip(gzip.compress(b"one"), 100) == b"one"
    chunks = list(inflate_chunks(gzip.compress(b"x" * 5000), 10_000, chunk_bytes=1024))
    assert [len(c) for c in chunks] == [1024] * 4 + [904]


@pytest.mark.parametrize("data, limit, message", [
    (gzip.compress(b"abc") + b"xy", 100, "corrupt gzip data (bytes after the end of the gzip stream)"),
    (gzip.compress(b"abcdefgh" * 10)[:12], 100, "truncated or corrupt gzip data (it ends too early)"),
    (gzip.compress(b"x" * 5000), 4999, "gzip data expands past 0.0 GiB (a gzip bomb, or a trace too big "
                                       "for this machine's memory)"),
])
def test_bad_gzip_data_is_a_decode_error(data, limit, message):
    with pytest.raises(DecodeError) as info:
        gunzip(data, limit)
    assert str(info.value) == message


def test_the_expansion_limit_has_a_floor_a_ratio_and_a_cap():
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    assert gunzip_limit(1) == gunzip_limit(1000) == min(memory // 3, GUNZIP_FLOOR)
    assert gunzip_limit(16 << 20) == min(memory // 3, 16 << 20 << 8)  # 256 times the file
    assert gunzip_limit(1 << 50) == memory // 3


def test_read_bytes_inflates_by_the_bytes_not_the_name(tmp_path):
    (tmp_path / "a.json").write_bytes(gzip.compress(b'{"traceEvents": []}'))
    (tmp_path / "b.json.gz").write_bytes(b'{"traceEvents": []}')
    assert bytes(read_bytes(tmp_path / "a.json")) == b'{"traceEvents": []}'
    assert bytes(read_bytes(tmp_path / "b.json.gz")) == b'{"traceEvents": []}'


def test_a_file_that_grew_after_it_was_opened_has_changed(tmp_path):
    path = tmp_path / "t.json"
    path.write_bytes(b"0123456789")
    with open(path, "rb") as fh:
        before = os.fstat(fh.fileno())
        assert read_all(fh) == b"0123456789"
        with open(path, "ab") as writer:
            writer.write(b"abcde")
        fh.seek(0)
        with pytest.raises(FileChanged) as info:
            read_all(fh, before)
    assert str(info.value) == ("changed while being read (10 bytes when opened, read 15, 15 bytes now); "
                               "load it again once it is complete")
    assert not same_file(before, os.stat(path)) and same_file(os.stat(path), os.stat(path))
