# SPDX-License-Identifier: MIT
"""`make install` gives a working library, headers and Python package: a C
program built only against the installed headers and libmuster runs a
tracker, whether it finds them by hand, through pkg-config (muster.pc) or
through CMake (find_package(muster), shared and static); the shared library
carries its soname; and the installed binding imports from outside the
source tree and loads the installed library."""

import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(REPO, "build")

C_PROGRAM = textwrap.dedent("""
    #include <stdio.h>
    #include <muster/tracker.h>
    #include <muster/server.h>

    int main(void)
    {
        mu_tracker_opts_t o;
        mu_tracker_t *t;
        mu_tracker_client_t *c;
        int rc;

        mu_tracker_opts_init(&o);
        o.host = "127.0.0.1";
        o.port = 0;
        o.silent = 1;
        rc = mu_tracker_start(&o, &t);
        if (rc != 0) {
            fprintf(stderr, "start: %s\\n", mu_strerror(rc));
            return 1;
        }
        rc = mu_tracker_client_connect("127.0.0.1", mu_tracker_port(t), 5000, &c);
        if (rc == 0)
            rc = mu_tracker_client_ping(c, 5000);
        mu_tracker_client_close(c);
        mu_tracker_free(t);
        printf("ping %d\\n", rc);
        /* the installed version.h and the installed library agree */
        printf("%s %s %d\\n", MU_VERSION_STRING, mu_version(),
               mu_version_num() == MU_VERSION_NUM);
        return rc != 0;
    }
""")


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    if not os.path.isfile(os.path.join(BUILD, "CMakeCache.txt")):
        pytest.fail(f"no build tree at {BUILD}: run `make build` first")
    dest = tmp_path_factory.mktemp("prefix")
    subprocess.run(["cmake", "--install", BUILD, "--prefix", str(dest)],
                   check=True, capture_output=True, timeout=120)
    return dest


def test_public_headers_build_a_program(prefix, tmp_path):
    src = tmp_path / "prog.c"
    src.write_text(C_PROGRAM)
    exe = tmp_path / "prog"
    cc = shutil.which("cc") or shutil.which("gcc")
    # -std=c11 -Werror: the public headers are clean C11 with no libuv,
    # cJSON or curl headers behind them
    subprocess.run([cc, "-std=c11", "-Wall", "-Wextra", "-Werror", str(src),
                    "-I", str(prefix / "include"), "-L", str(prefix / "lib"),
                    "-lmuster", "-o", str(exe)], check=True, timeout=120)
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30,
                         env={**os.environ, "LD_LIBRARY_PATH": str(prefix / "lib")})
    assert out.returncode == 0, out.stderr
    version = project_version()
    assert out.stdout == f"ping 0\n{version} {version} 1\n"


def test_muster_version_prints_the_project_version():
    out = subprocess.run([os.path.join(BUILD, "bin", "muster"), "version"],
                         capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout == f"muster {project_version()}\n"


def test_installed_python_package(prefix, tmp_path):
    vers = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = prefix / "lib" / vers / "dist-packages"
    assert (site / "muster" / "__init__.py").is_file()
    code = textwrap.dedent("""
        import muster, muster._lib as l
        t = muster.Tracker(host="127.0.0.1", port=0, silent=True)
        c = muster.connect_tracker("127.0.0.1", t.port)
        assert c.summary() == {"queue_info": {}, "server_info": []}
        c.close()
        t.terminate()
        print(muster.__file__)
        print(l.lib._name)
    """)
    env = {k: v for k, v in os.environ.items() if k != "MUSTER_LIB"}
    env["PYTHONPATH"] = str(site)
    out = subprocess.run([sys.executable, "-c", code], cwd=str(tmp_path), env=env,
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    pkg, libpath = out.stdout.split()
    assert pkg.startswith(str(site))
    assert libpath.startswith(str(prefix / "lib")), "it must use the installed library"


def run_prog(exe, prefix):
    out = subprocess.run([str(exe)], capture_output=True, text=True, timeout=30,
                         env={**os.environ, "LD_LIBRARY_PATH": str(prefix / "lib")})
    assert out.returncode == 0, out.stderr
    # the installed version.h and the installed library agree
    version = project_version()
    assert out.stdout == f"ping 0\n{version} {version} 1\n"


def test_soname_is_versioned(prefix):
    lib = prefix / "lib"
    real = sorted(p.name for p in lib.glob("libmuster.so.*.*.*"))
    assert len(real) == 1, real
    major = real[0].split(".")[2]
    dyn = subprocess.run(["objdump", "-p", str(lib / real[0])], capture_output=True,
                         text=True, check=True, timeout=30).stdout
    assert re.search(rf"SONAME\s+libmuster\.so\.{major}$", dyn, re.M), dyn
    assert os.readlink(lib / f"libmuster.so.{major}") == real[0]
    assert os.readlink(lib / "libmuster.so") == f"libmuster.so.{major}"
    assert (lib / "libmuster.a").is_file()


def test_pkg_config_builds_a_program(prefix, tmp_path):
    src = tmp_path / "prog.c"
    src.write_text(C_PROGRAM)
    env = {**os.environ, "PKG_CONFIG_PATH": str(prefix / "lib" / "pkgconfig")}
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "muster"], env=env,
                           capture_output=True, text=True, check=True, timeout=30).stdout
    assert f"-I{prefix}" in flags.replace("/lib/pkgconfig/../..", ""), flags
    version = subprocess.run(["pkg-config", "--modversion", "muster"], env=env,
                             capture_output=True, text=True, check=True).stdout.strip()
    assert version == project_version()
    exe = tmp_path / "prog"
    cc = shutil.which("cc") or shutil.which("gcc")
    subprocess.run([cc, "-std=c11", "-Wall", "-Werror", str(src), "-o", str(exe)]
                   + flags.split(), check=True, timeout=120)
    run_prog(exe, prefix)


CMAKE_PROJECT = textwrap.dedent("""
    cmake_minimum_required(VERSION 3.18)
    project(prog C)
    find_package(muster {version} REQUIRED)
    add_executable(prog prog.c)
    target_link_libraries(prog PRIVATE muster::{target})
""")


@pytest.mark.parametrize("target", ["muster", "muster_static"])
def test_cmake_package_builds_a_program(prefix, tmp_path, target):
    srcdir = tmp_path / "src"
    srcdir.mkdir()
    (srcdir / "prog.c").write_text(C_PROGRAM)
    (srcdir / "CMakeLists.txt").write_text(
        CMAKE_PROJECT.format(version=project_version(), target=target))
    bdir = tmp_path / "b"
    subprocess.run(["cmake", "-S", str(srcdir), "-B", str(bdir),
                    f"-DCMAKE_PREFIX_PATH={prefix}"], check=True, capture_output=True,
                   timeout=120)
    subprocess.run(["cmake", "--build", str(bdir)], check=True, capture_output=True,
                   timeout=300)
    exe = bdir / "prog"
    needed = subprocess.run(["objdump", "-p", str(exe)], capture_output=True, text=True,
                            check=True).stdout
    # the static form carries libmuster inside; the shared one needs the .so
    assert ("libmuster.so" in needed) == (target == "muster"), needed
    run_prog(exe, prefix)


def project_version():
    """The version project() in CMakeLists.txt sets: the one source."""
    text = open(os.path.join(REPO, "CMakeLists.txt")).read()
    return re.search(r"project\(muster VERSION (\S+)", text).group(1)
