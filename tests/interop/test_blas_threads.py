# SPDX-License-Identifier: MIT
"""OpenBLAS's thread count is one setting per process, shared by libmuster
and numpy (Debian's numpy reaches OpenBLAS through libblas.so.3, which is
libopenblas.so.0, the library libmuster links). It is the program's: the
library never changes it (issue 21; issue 16 had it set for the length of
a forward and put back). A forward splits its products over the model's
own threads instead (mu_model_set_threads, mu_stage_set_threads), and its
outputs are the same bits at every count when OpenBLAS runs on one thread,
the program's choice that muster/model.h asks for.

The model calls go straight through ctypes (the binding does not wrap the
model layer); the library is build/lib/libmuster.so or $MUSTER_LIB, the
model and its input are made by $MUSTER_BIN."""

import ctypes
import os
import subprocess

import numpy  # noqa: F401 - loaded first, as a numpy program would

from conftest import REPO

LIB = os.environ.get("MUSTER_LIB") or str(REPO / "build" / "lib" / "libmuster.so")
lib = ctypes.CDLL(LIB)
blas = ctypes.CDLL("libopenblas.so.0")
blas.openblas_get_num_threads.restype = ctypes.c_int
blas.openblas_set_num_threads.argtypes = [ctypes.c_int]

c_void_pp = ctypes.POINTER(ctypes.c_void_p)


class TensorList(ctypes.Structure):
    """mu_tensor_list_t (include/muster/tensor.h)."""
    _fields_ = [("t", c_void_pp), ("n", ctypes.c_size_t), ("cap", ctypes.c_size_t)]


def call(fn, *args):
    err = ctypes.create_string_buffer(512)
    rc = fn(*args, err, len(err))
    assert rc == 0, f"{fn.__name__}: {rc} {err.value.decode()}"


def model_dir(tmp_path, muster_bin, widths="64,96,32", batch=4):
    """A generated MLP and an input for it, made by the command (the
    generator is a fixture, not the library's API); the input is read
    with mu_safetensors_read (inputs())."""
    d = tmp_path / "mlp"
    subprocess.run([str(muster_bin), "model", "gen", "--out", str(d), "--widths", widths,
                    "--batch", str(batch)], check=True, capture_output=True, timeout=60)
    subprocess.run([str(muster_bin), "model", "input", "--model", str(d), "--out",
                    str(tmp_path / "in.safetensors")], check=True, capture_output=True,
                   timeout=60)
    return str(d).encode()


def inputs(tmp_path):
    lst = TensorList()
    lib.mu_tensor_list_init(ctypes.byref(lst))
    lib.mu_safetensors_read.argtypes = [ctypes.c_char_p, ctypes.POINTER(TensorList),
                                        ctypes.c_char_p, ctypes.c_size_t]
    call(lib.mu_safetensors_read, str(tmp_path / "in.safetensors").encode(), ctypes.byref(lst))
    assert lst.n == 1
    return lst


def test_numpy_and_openblas_share_one_library():
    # the premise: numpy's BLAS and libmuster's are one copy of OpenBLAS
    # (libblas.so.3 and liblapack.so.3 are thin layers over it)
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "/libopenblas" in line}
    assert len(paths) == 1, paths


def test_a_model_run_leaves_the_callers_thread_count(tmp_path, muster_bin):
    d = model_dir(tmp_path, muster_bin)
    m = ctypes.c_void_p()
    lib.mu_model_open.argtypes = [ctypes.c_char_p, c_void_pp, ctypes.c_char_p, ctypes.c_size_t]
    call(lib.mu_model_open, d, ctypes.byref(m))
    lst, out = inputs(tmp_path), TensorList()
    lib.mu_tensor_list_init(ctypes.byref(out))
    lib.mu_model_run.argtypes = [ctypes.c_void_p, ctypes.POINTER(TensorList),
                                 ctypes.POINTER(TensorList), ctypes.c_char_p, ctypes.c_size_t]
    lib.mu_model_set_threads.argtypes = [ctypes.c_void_p, ctypes.c_int]
    before = blas.openblas_get_num_threads()
    try:
        for mine, model in ((2, 1), (1, 2), (3, 1)):
            blas.openblas_set_num_threads(mine)
            mine = blas.openblas_get_num_threads()  # as OpenBLAS clamps it
            assert lib.mu_model_set_threads(m, model) == 0
            call(lib.mu_model_run, m, ctypes.byref(lst), ctypes.byref(out))
            assert blas.openblas_get_num_threads() == mine
        assert out.n == 3  # one output per run
        assert lib.mu_model_set_threads(m, 0) != 0
    finally:
        blas.openblas_set_num_threads(before)
        lib.mu_tensor_list_free(ctypes.byref(lst))
        lib.mu_tensor_list_free(ctypes.byref(out))
        lib.mu_model_close(m)


def test_a_stage_load_and_forward_leave_it_too(tmp_path, muster_bin):
    d = model_dir(tmp_path, muster_bin)
    s = ctypes.c_void_p()
    lib.mu_stage_load.argtypes = [ctypes.c_char_p, ctypes.c_int, ctypes.c_int, c_void_pp,
                                  ctypes.c_char_p, ctypes.c_size_t]
    lib.mu_stage_forward.argtypes = [ctypes.c_void_p, ctypes.POINTER(TensorList),
                                     ctypes.POINTER(TensorList), ctypes.c_char_p,
                                     ctypes.c_size_t]
    lib.mu_stage_set_threads.argtypes = [ctypes.c_void_p, ctypes.c_int]
    before = blas.openblas_get_num_threads()
    lst, out = inputs(tmp_path), TensorList()
    lib.mu_tensor_list_init(ctypes.byref(out))
    try:
        blas.openblas_set_num_threads(2)
        mine = blas.openblas_get_num_threads()
        call(lib.mu_stage_load, d, 0, 1, ctypes.byref(s))
        assert blas.openblas_get_num_threads() == mine
        assert lib.mu_stage_set_threads(s, 1) == 0
        call(lib.mu_stage_forward, s, ctypes.byref(lst), ctypes.byref(out))
        assert blas.openblas_get_num_threads() == mine
        assert out.n == 1
    finally:
        blas.openblas_set_num_threads(before)
        lib.mu_tensor_list_free(ctypes.byref(lst))
        lib.mu_tensor_list_free(ctypes.byref(out))
        lib.mu_stage_free(s)


def test_the_library_never_sets_the_count():
    # not imported at all, so no call of the library can change it
    syms = subprocess.run(["nm", "-D", "--undefined-only", LIB], check=True,
                          capture_output=True, text=True, timeout=60).stdout
    assert "cblas_sgemm" in syms  # the premise: the products are OpenBLAS's
    assert "openblas_set_num_threads" not in syms and "goto_set_num_threads" not in syms, syms


def test_outputs_are_the_same_bits_at_every_thread_count(tmp_path, muster_bin):
    """Products large enough to be split over the model's threads (256 rows
    of 512 by 256): one output file per count, byte for byte the same."""
    d = model_dir(tmp_path, muster_bin, widths="256,512,256,64", batch=256)
    m = ctypes.c_void_p()
    lib.mu_model_open.argtypes = [ctypes.c_char_p, c_void_pp, ctypes.c_char_p, ctypes.c_size_t]
    call(lib.mu_model_open, d, ctypes.byref(m))
    lib.mu_model_run.argtypes = [ctypes.c_void_p, ctypes.POINTER(TensorList),
                                 ctypes.POINTER(TensorList), ctypes.c_char_p, ctypes.c_size_t]
    lib.mu_model_set_threads.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.mu_safetensors_write.argtypes = [ctypes.c_char_p, ctypes.POINTER(TensorList)]
    before = blas.openblas_get_num_threads()
    lst, files = inputs(tmp_path), []
    try:
        blas.openblas_set_num_threads(1)
        for threads in (1, 2, 3, 1):
            out = TensorList()
            lib.mu_tensor_list_init(ctypes.byref(out))
            assert lib.mu_model_set_threads(m, threads) == 0
            call(lib.mu_model_run, m, ctypes.byref(lst), ctypes.byref(out))
            assert blas.openblas_get_num_threads() == 1
            path = tmp_path / f"out-{len(files)}-{threads}.safetensors"
            assert lib.mu_safetensors_write(str(path).encode(), ctypes.byref(out)) == 0
            lib.mu_tensor_list_free(ctypes.byref(out))
            files.append(path.read_bytes())
    finally:
        blas.openblas_set_num_threads(before)
        lib.mu_tensor_list_free(ctypes.byref(lst))
        lib.mu_model_close(m)
    assert len(files[0]) > 256 * 64 * 4
    assert all(f == files[0] for f in files), "an output changed with the thread count"
