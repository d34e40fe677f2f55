# Imported targets for the prebuilt engine:
#   engine::llama   libllama + ggml (include/llama.h, ggml headers)
#   engine::common  llama.cpp's common library (chat templates, sampling, json)
#   engine::mtmd    libmtmd, the multimodal projector library (tools/mtmd: mtmd.h, mtmd-helper.h)
#   engine::httplib the cpp-httplib static library from the engine's vendor folder
#   engine::vendor  header-only vendor libraries (nlohmann/json.hpp)
if(NOT LINEAGE_ENGINE_SRC OR NOT LINEAGE_ENGINE_BUILD)
  message(FATAL_ERROR "LINEAGE_ENGINE_SRC and LINEAGE_ENGINE_BUILD must be set; run scripts/bootstrap")
endif()

set(_eb "${LINEAGE_ENGINE_BUILD}")
set(_es "${LINEAGE_ENGINE_SRC}")

function(_lineage_engine_lib name file)
  if(NOT EXISTS "${file}")
    message(FATAL_ERROR "engine library missing: ${file}; run scripts/bootstrap")
  endif()
  add_library(${name} SHARED IMPORTED GLOBAL)
  set_target_properties(${name} PROPERTIES IMPORTED_LOCATION "${file}")
endfunction()

_lineage_engine_lib(engine::ggml_base "${_eb}/bin/libggml-base.so")
_lineage_engine_lib(engine::ggml      "${_eb}/bin/libggml.so")
_lineage_engine_lib(engine::llama_lib "${_eb}/bin/libllama.so")
_lineage_engine_lib(engine::common_lib "${_eb}/bin/libllama-common.so")
_lineage_engine_lib(engine::mtmd_lib "${_eb}/bin/libmtmd.so")

add_library(engine::llama INTERFACE IMPORTED GLOBAL)
target_include_directories(engine::llama SYSTEM INTERFACE "${_es}/include" "${_es}/ggml/include")
target_link_libraries(engine::llama INTERFACE engine::llama_lib engine::ggml engine::ggml_base)

add_library(engine::mtmd INTERFACE IMPORTED GLOBAL)
target_include_directories(engine::mtmd SYSTEM INTERFACE "${_es}/tools/mtmd")
target_link_libraries(engine::mtmd INTERFACE engine::mtmd_lib engine::llama)

add_library(engine::vendor INTERFACE IMPORTED GLOBAL)
target_include_directories(engine::vendor SYSTEM INTERFACE "${_es}/vendor")

add_library(engine::common INTERFACE IMPORTED GLOBAL)
target_include_directories(engine::common SYSTEM INTERFACE "${_es}/common")
target_link_libraries(engine::common INTERFACE engine::common_lib engine::llama engine::vendor)

set(_httplib "${_eb}/vendor/cpp-httplib/libcpp-httplib.a")
if(NOT EXISTS "${_httplib}")
  message(FATAL_ERROR "cpp-httplib missing: ${_httplib}; run scripts/bootstrap")
endif()
add_library(engine::httplib STATIC IMPORTED GLOBAL)
set_target_properties(engine::httplib PROPERTIES IMPORTED_LOCATION "${_httplib}")
target_include_directories(engine::httplib SYSTEM INTERFACE "${_es}/vendor/cpp-httplib")
target_link_libraries(engine::httplib INTERFACE Threads::Threads)

# An engine built with ggml's backends as loadable modules (GGML_BACKEND_DL: scripts/bootstrap's
# CUDA build) registers no backend until they are loaded: lineage loads them from the directory
# of libggml at startup (src/engine/model.cpp), in the build tree and in the package alike.
set(LINEAGE_ENGINE_BACKEND_DL OFF)
if(EXISTS "${_eb}/CMakeCache.txt")
  file(STRINGS "${_eb}/CMakeCache.txt" _dl REGEX "^GGML_BACKEND_DL:BOOL=ON$")
  if(_dl)
    set(LINEAGE_ENGINE_BACKEND_DL ON)
    target_compile_definitions(engine::llama INTERFACE LINEAGE_ENGINE_BACKEND_DL=1)
    message(STATUS "lineage: the engine's backends are loadable modules (GGML_BACKEND_DL)")
  endif()
endif()

# Shared engine libraries are found at run time through the build tree's rpath.
set(CMAKE_BUILD_RPATH "${_eb}/bin")
set(LINEAGE_ENGINE_BIN "${_eb}/bin")
