# Installation and the Debian package (README.md "Installing the package").
#   cmake --install build --prefix P   P/bin/lineage-server, P/bin/lineage-mkmodel and the engine's
#                                      shared libraries in P/lib/lineage, found through the relative
#                                      RPATH $ORIGIN/../lib/lineage (the libraries' own: $ORIGIN)
#   cpack --config build/CPackConfig.cmake -G DEB
#                                      lineage-server_VERSION_ARCH.deb: the above under /usr, plus the
#                                      systemd unit, /etc/default/lineage-server and the maintainer
#                                      scripts of packaging/ (a system user, /var/cache/lineage)
# The unit and the environment file have absolute destinations: they are a component of their own
# ("service"), left out of a plain `cmake --install` and put in the package by CPack.
include(GNUInstallDirs)

set(LINEAGE_VERSION "0.1.0" CACHE STRING "version of the lineage package")
set(_libdir "${CMAKE_INSTALL_LIBDIR}/lineage")

set_target_properties(lineage-server lineage-mkmodel PROPERTIES INSTALL_RPATH "\$ORIGIN/../${_libdir}")
install(TARGETS lineage-server lineage-mkmodel RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}" COMPONENT runtime)

# The engine's libraries the two binaries load (directly or through libggml: libggml-cpu), as
# their versioned files and SONAME links; the unversioned development links are left out.
set(_engine_libs)
set(_linked ggml-base ggml ggml-cpu llama llama-common mtmd)
if(LINEAGE_ENGINE_BACKEND_DL)
  # The backends are modules (libggml-cpu.so, libggml-cuda.so, no version), loaded from
  # libggml's directory: installed beside it.
  list(REMOVE_ITEM _linked ggml-cpu)
  file(GLOB _modules "${LINEAGE_ENGINE_BIN}/libggml-*.so")
  list(FILTER _modules EXCLUDE REGEX "/libggml-base\\.so$")
  list(APPEND _engine_libs ${_modules})
endif()
foreach(_name ${_linked})
  file(GLOB _files "${LINEAGE_ENGINE_BIN}/lib${_name}.so.*")
  if(NOT _files)
    message(FATAL_ERROR "engine library lib${_name}.so.* missing in ${LINEAGE_ENGINE_BIN}; run scripts/bootstrap")
  endif()
  list(APPEND _engine_libs ${_files})
endforeach()
install(FILES ${_engine_libs} DESTINATION "${_libdir}" COMPONENT runtime)
# lineage-mkmodel's tokenizer and chat template, found beside the binary once the engine's
# source tree is not there (tools/mkmodel/mkmodel.cpp data_file).
install(FILES "${LINEAGE_ENGINE_SRC}/models/ggml-vocab-qwen35.gguf" "${LINEAGE_ENGINE_SRC}/models/templates/Qwen3.5-4B.jinja"
        DESTINATION "${CMAKE_INSTALL_DATADIR}/lineage" COMPONENT runtime)
# The engine's build gives its libraries a RUNPATH into its build tree; installed, they find each
# other next to themselves.
set(_real_libs)
foreach(_f ${_engine_libs})
  if(NOT IS_SYMLINK "${_f}")
    get_filename_component(_n "${_f}" NAME)
    list(APPEND _real_libs "${_n}")
  endif()
endforeach()
install(CODE "
  foreach(_n ${_real_libs})
    set(_p \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${_libdir}/\${_n}\")
    # READ_ELF leaves the variable alone for a file without a RUNPATH (libggml-base): cleared
    # first, or such a file would get the RPATH_SET of the file before it, which fails.
    unset(_runpath)
    file(READ_ELF \"\${_p}\" RUNPATH _runpath)
    if(_runpath)
      file(RPATH_SET FILE \"\${_p}\" NEW_RPATH \"\\\$ORIGIN\")
    endif()
  endforeach()" COMPONENT runtime)

set(_pkg "${PROJECT_SOURCE_DIR}/packaging")
install(FILES "${_pkg}/lineage-server.service" DESTINATION /lib/systemd/system COMPONENT service EXCLUDE_FROM_ALL)
install(FILES "${_pkg}/lineage-server.default" DESTINATION /etc/default RENAME lineage-server
        COMPONENT service EXCLUDE_FROM_ALL)

set(CPACK_PACKAGE_NAME "lineage-server")
set(CPACK_PACKAGE_VERSION "${LINEAGE_VERSION}")
set(CPACK_PACKAGE_VENDOR "lineage")
set(CPACK_PACKAGE_CONTACT "lineage maintainers <lineage@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "OpenAI-compatible LLM inference server with a prompt cache")
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_INSTALL_PREFIX "/usr")  # the prefix under CPACK_SET_DESTDIR
# Absolute destinations (the unit, /etc/default) go into the package's tree, not this machine's.
set(CPACK_SET_DESTDIR ON)
set(CPACK_STRIP_FILES ON)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_GROUPING ALL_COMPONENTS_IN_ONE)
set(CPACK_COMPONENTS_ALL runtime service)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION "net")
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
# The engine's libraries are in the package itself.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS "${LINEAGE_ENGINE_BIN}")
if(EXISTS "${LINEAGE_ENGINE_BIN}/libggml-cuda.so")
  # The CUDA build (README.md "GPUs"): its CUDA backend module needs the CUDA runtime (libcudart,
  # libcublas, libnccl) and the NVIDIA driver (libcuda.so.1), which are not Debian packages. The
  # package does not depend on them: the module loads where they are installed and, where they
  # are not, the server runs on the CPU backend and says why in one INFO line. dpkg-shlibdeps
  # is shown the toolkit's libraries and the driver's stub as private, so it asks for neither.
  find_package(CUDAToolkit QUIET)
  if(CUDAToolkit_FOUND)
    set(_stub_dir "${CMAKE_BINARY_DIR}/package-cuda-driver-stub")
    file(MAKE_DIRECTORY "${_stub_dir}")
    if(EXISTS "${CUDAToolkit_LIBRARY_DIR}/stubs/libcuda.so")
      file(CREATE_LINK "${CUDAToolkit_LIBRARY_DIR}/stubs/libcuda.so" "${_stub_dir}/libcuda.so.1" SYMBOLIC)
    endif()
    list(APPEND CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS "${CUDAToolkit_LIBRARY_DIR}" "${_stub_dir}")
  endif()
endif()
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    "${_pkg}/deb/postinst;${_pkg}/deb/prerm;${_pkg}/deb/postrm;${_pkg}/deb/conffiles")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
include(CPack)
