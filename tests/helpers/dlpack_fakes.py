"""A hand-made DLPack producer, for inputs no installed library can make here (CUDA arrays on a
machine without a GPU). It exports a DLManagedTensor that claims any device."""

from __future__ import annotations

import ctypes


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p),
                ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]

KDL_CPU, KDL_CUDA = 1, 2


class FakeDeviceArray:
    """A float32 array of ``shape`` whose DLPack export claims ``device_type`` (no real memory:
    consumers must reject it before touching data)."""

    def __init__(self, shape, device_type: int = KDL_CUDA, device_id: int = 0) -> None:
        self.shape = tuple(shape)
        self.dtype = "float32"
        self._device = (device_type, device_id)
        self._shape = (ctypes.c_int64 * len(shape))(*shape)
        self._managed = _DLManagedTensor()
        t = self._managed.dl_tensor
        t.data = 0x1000  # never dereferenced
        t.device = _DLDevice(device_type, device_id)
        t.ndim = len(shape)
        t.dtype = _DLDataType(2, 32, 1)
        t.shape = self._shape
        t.strides = None
        t.byte_offset = 0

    def __dlpack_device__(self):
        return self._device

    def __dlpack__(self, stream=None):
        return _capsule_new(ctypes.addressof(self._managed), b"dltensor", None)
