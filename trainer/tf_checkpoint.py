"""Read a TensorFlow checkpoint (the V2 "tensor bundle": PREFIX.index + PREFIX.data-NNNNN-of-NNNNN) without
TensorFlow, into numpy arrays: what MLPerf's BERT phase-1 checkpoint (model.ckpt-28252) is.

TensorFlow is a 270 MB wheel whose numpy and protobuf pins fight the rest of this project's stack, so the
format is read here: the .index file is a LevelDB-format table (TF's tensorflow/core/lib/io/table_format,
LevelDB's doc/table_format.md: data blocks of prefix-compressed keys, an index block, a 48-byte footer
ending in the magic 0xdb4775248b80fb57; TF writes it uncompressed), whose values are BundleEntryProto
messages (tensorflow/core/protobuf/tensor_bundle.proto: dtype, shape, shard, offset, size), decoded with
protobuf and the TensorShapeProto/DataType definitions tensorboard ships (tensorboard.compat.proto). Each
tensor is the little-endian bytes at its offset in its shard. Checked against tf.train.load_variable on
a checkpoint TensorFlow wrote (tests/trainer/tf_bert/README.md).
"""
from __future__ import annotations

import os
import struct

import numpy as np

from telemetry.errors import InputError

MAGIC = 0xDB4775248B80FB57
# tensorflow/core/framework/types.proto DataType -> numpy
DTYPES = {1: np.float32, 2: np.float64, 3: np.int32, 4: np.uint8, 5: np.int16, 6: np.int8, 9: np.int64,
          10: np.bool_, 17: np.uint16, 19: np.float16, 22: np.uint32, 23: np.uint64}
BFLOAT16 = 14


class TfCheckpointError(InputError, ValueError):
    """A checkpoint that cannot be read; one line naming the file and what is wrong."""


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    out = shift = 0
    while True:
        if pos >= len(buf):
            raise TfCheckpointError("truncated varint in the index")
        b = buf[pos]
        pos += 1
        out |= (b & 0x7F) << shift
        if not b & 0x80:
            return out, pos
        shift += 7


def _block(data: bytes, offset: int, size: int) -> list[tuple[bytes, bytes]]:
    """One table block's (key, value) entries; the byte after the block is its compression type."""
    if data[offset + size] != 0:
        raise TfCheckpointError(f"a compressed index block (type {data[offset + size]}); TensorFlow writes none")
    block = data[offset:offset + size]
    (restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    end = len(block) - 4 - 4 * restarts
    out, pos, key = [], 0, b""
    while pos < end:
        shared, pos = _varint(block, pos)
        unshared, pos = _varint(block, pos)
        vlen, pos = _varint(block, pos)
        key = key[:shared] + block[pos:pos + unshared]
        pos += unshared
        out.append((key, block[pos:pos + vlen]))
        pos += vlen
    return out


def _entry_class():
    """BundleEntryProto built with protobuf from its .proto definition (fields 1-6; 7, slices, unused here)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from tensorboard.compat.proto import tensor_shape_pb2, types_pb2

    pool = descriptor_pool.DescriptorPool()
    for mod in (types_pb2, tensor_shape_pb2):
        proto = descriptor_pb2.FileDescriptorProto()
        mod.DESCRIPTOR.CopyToProto(proto)
        pool.Add(proto)
    f = descriptor_pb2.FileDescriptorProto(name="fabric_harness_tensor_bundle.proto", package="tensorboard",
                                           dependency=[types_pb2.DESCRIPTOR.name, tensor_shape_pb2.DESCRIPTOR.name])
    m = f.message_type.add(name="BundleEntryProto")
    fd = descriptor_pb2.FieldDescriptorProto
    for name, num, typ, tname in (("dtype", 1, fd.TYPE_ENUM, ".tensorboard.DataType"),
                                  ("shape", 2, fd.TYPE_MESSAGE, ".tensorboard.TensorShapeProto"),
                                  ("shard_id", 3, fd.TYPE_INT32, None), ("offset", 4, fd.TYPE_INT64, None),
                                  ("size", 5, fd.TYPE_INT64, None), ("crc32c", 6, fd.TYPE_FIXED32, None)):
        field = m.field.add(name=name, number=num, type=typ, label=fd.LABEL_OPTIONAL)
        if tname:
            field.type_name = tname
    pool.Add(f)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorboard.BundleEntryProto"))


def list_variables(prefix: str) -> dict[str, dict]:
    """{name: {dtype, shape, shard_id, offset, size}} from PREFIX.index."""
    path = prefix + ".index"
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as exc:
        raise TfCheckpointError(f"{path}: {exc.strerror or exc}; expected a TensorFlow checkpoint prefix (the "
                                "path without .index, e.g. model.ckpt-28252)") from None
    if len(data) < 48 or struct.unpack_from("<Q", data, len(data) - 8)[0] != MAGIC:
        raise TfCheckpointError(f"{path}: not a TensorFlow checkpoint index (no table magic at its end)")
    footer = data[-48:]
    _, pos = _varint(footer, 0)
    _, pos = _varint(footer, pos)  # metaindex handle: unused
    idx_off, pos = _varint(footer, pos)
    idx_size, _ = _varint(footer, pos)
    entry_cls = _entry_class()
    out = {}
    for _, handle in _block(data, idx_off, idx_size):
        off, p = _varint(handle, 0)
        size, _ = _varint(handle, p)
        for key, value in _block(data, off, size):
            if not key:  # the header (BundleHeaderProto): number of shards, endianness
                continue
            e = entry_cls.FromString(value)
            out[key.decode()] = {"dtype": e.dtype, "shape": [d.size for d in e.shape.dim], "shard_id": e.shard_id,
                                 "offset": e.offset, "size": e.size}
    return out


def load(prefix: str, names=None) -> dict[str, np.ndarray]:
    """The checkpoint's numeric tensors (or those named) as numpy arrays."""
    entries = list_variables(prefix)
    shards = sorted(n for n in os.listdir(os.path.dirname(os.path.abspath(prefix)) or ".")
                    if n.startswith(os.path.basename(prefix) + ".data-"))
    if not shards:
        raise TfCheckpointError(f"{prefix}: no {os.path.basename(prefix)}.data-NNNNN-of-NNNNN file beside the index")
    total = int(shards[0].rsplit("-of-", 1)[1])
    out = {}
    files: dict[int, object] = {}
    try:
        for name, e in entries.items():
            if names is not None and name not in names:
                continue
            if e["dtype"] not in DTYPES and e["dtype"] != BFLOAT16:
                continue  # strings and resources: not weights
            sid = e["shard_id"]
            if sid not in files:
                files[sid] = open(f"{prefix}.data-{sid:05d}-of-{total:05d}", "rb")
            f = files[sid]
            f.seek(e["offset"])
            raw = f.read(e["size"])
            if len(raw) != e["size"]:
                raise TfCheckpointError(f"{prefix}: {name} is cut short in shard {sid}")
            if e["dtype"] == BFLOAT16:  # the high half of a float32
                arr = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32)
            else:
                arr = np.frombuffer(raw, np.dtype(DTYPES[e["dtype"]]).newbyteorder("<"))
            out[name] = arr.reshape(e["shape"]).copy()
    finally:
        for f in files.values():
            f.close()
    return out
