# SPDX-License-Identifier: MIT
# What `cmake --install` puts under the prefix: the command, libmuster.so.N
# (soname = major version) and libmuster.a, the public headers, muster.pc
# for pkg-config, a CMake package (find_package(muster)), the ctypes
# binding, the systemd units and the man pages. Included by the top
# CMakeLists.txt after the targets are defined.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS muster muster_static EXPORT muster-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS muster_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/muster DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        PATTERN "*.in" EXCLUDE)
# version.h is generated from version.h.in (CMakeLists.txt)
install(FILES ${PROJECT_BINARY_DIR}/include/muster/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/muster)

# The pkg-config modules libmuster links: name in this build = module.
set(MU_DEP_PAIRS LIBUV=libuv CJSON=libcjson OPENBLAS=openblas PCRE2=libpcre2-8
    UTF8PROC=libutf8proc SSL=libssl CRYPTO=libcrypto H2O=libh2o)
if(MU_WITH_CURL)
  list(APPEND MU_DEP_PAIRS CURL=libcurl)
endif()
set(MU_PC_REQUIRES "")
foreach(_p ${MU_DEP_PAIRS})
  string(REGEX REPLACE "^[^=]*=" "" _m "${_p}")
  string(APPEND MU_PC_REQUIRES " ${_m}")
endforeach()
string(STRIP "${MU_PC_REQUIRES}" MU_PC_REQUIRES)

# muster.pc finds its prefix from its own directory: count the steps up
# from LIBDIR/pkgconfig to the prefix (LIBDIR may be lib/x86_64-linux-gnu).
file(RELATIVE_PATH MU_PC_UP "/mu_prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/mu_prefix")
string(REGEX REPLACE "/$" "" MU_PC_UP "${MU_PC_UP}")
configure_file(cmake/muster.pc.in ${PROJECT_BINARY_DIR}/muster.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/muster.pc
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)

set(MU_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/muster)
install(EXPORT muster-targets NAMESPACE muster:: DESTINATION ${MU_CMAKE_DIR})
configure_package_config_file(cmake/muster-config.cmake.in
  ${PROJECT_BINARY_DIR}/muster-config.cmake INSTALL_DESTINATION ${MU_CMAKE_DIR})
# 0.x releases promise nothing across minor versions; from 1.0 on, the
# same major version is compatible.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(_mu_compat SameMinorVersion)
else()
  set(_mu_compat SameMajorVersion)
endif()
write_basic_package_version_file(${PROJECT_BINARY_DIR}/muster-config-version.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY ${_mu_compat})
install(FILES ${PROJECT_BINARY_DIR}/muster-config.cmake
              ${PROJECT_BINARY_DIR}/muster-config-version.cmake
        DESTINATION ${MU_CMAKE_DIR})

# systemd units, with this install's path to the command; Type=notify
# when the command was built with sd_notify.
if(SYSTEMD_FOUND)
  set(MU_SD_TYPE notify)
else()
  set(MU_SD_TYPE simple)
endif()
set(MU_BINDIR ${CMAKE_INSTALL_FULL_BINDIR})
set(MU_UNITDIR lib/systemd/system CACHE STRING "Where the systemd units go, under the prefix")
foreach(_u muster-tracker.service muster-store.service muster-server@.service
           muster-stage@.service)
  configure_file(systemd/${_u}.in ${PROJECT_BINARY_DIR}/systemd/${_u} @ONLY)
  install(FILES ${PROJECT_BINARY_DIR}/systemd/${_u} DESTINATION ${MU_UNITDIR})
endforeach()
install(FILES systemd/muster.sysusers.conf DESTINATION lib/sysusers.d RENAME muster.conf)
# Their options, the files the units read (EnvironmentFile=-/etc/default/NAME):
# PREFIX/etc/default by default, /etc/default for the package (debian/rules
# gives MU_SYSCONFDIR=/etc, and dh makes them conffiles).
set(MU_SYSCONFDIR ${CMAKE_INSTALL_SYSCONFDIR} CACHE STRING
    "Where the units' /etc/default files go (under the prefix when relative)")
foreach(_d muster-tracker muster-store muster-server muster-stage)
  install(FILES systemd/default-${_d} DESTINATION ${MU_SYSCONFDIR}/default RENAME ${_d})
endforeach()

# The ctypes binding, where this machine's python3 looks for packages under
# the prefix (PREFIX/lib/python3.X/dist-packages on Debian); it finds the
# library at PREFIX/lib or through the loader.
find_package(Python3 COMPONENTS Interpreter)
if(Python3_FOUND)
  set(MU_PYTHON_DIR
      "lib/python${Python3_VERSION_MAJOR}.${Python3_VERSION_MINOR}/dist-packages"
      CACHE STRING "Where `make install` puts the Python package, under the prefix")
  install(DIRECTORY python/muster DESTINATION ${MU_PYTHON_DIR}
          PATTERN "__pycache__" EXCLUDE)
endif()

# The man pages, written by the built command from the option tables its
# --help prints (`muster help-man DIR`), so they never drift from it.
add_custom_command(
  OUTPUT ${PROJECT_BINARY_DIR}/man/muster.1
  COMMAND ${CMAKE_COMMAND} -E rm -rf ${PROJECT_BINARY_DIR}/man
  COMMAND $<TARGET_FILE:muster_cli> help-man ${PROJECT_BINARY_DIR}/man
  DEPENDS muster_cli
  COMMENT "Writing the man pages (muster help-man)"
  VERBATIM)
add_custom_target(man ALL DEPENDS ${PROJECT_BINARY_DIR}/man/muster.1)
install(DIRECTORY ${PROJECT_BINARY_DIR}/man/ DESTINATION ${CMAKE_INSTALL_MANDIR}/man1
        FILES_MATCHING PATTERN "*.1")
