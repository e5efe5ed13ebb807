# The libraries the Python module links (core, traces, sim and ppsim's commands), exported from
# this build tree as pipescope_prebuilt::* in pipescope-prebuilt.cmake. python/CMakeLists.txt,
# configured alone by the Python build backend with PIPESCOPE_PREBUILT_DIR set to this build
# folder, links them instead of compiling them again: CI's wheel stage builds the wheel from the
# objects its main build just tested (scripts/test-python.sh), where `pip install .` compiles
# everything from the sources. The file names the build's dependencies so that the importing
# project finds the same ones.
export(TARGETS pipescope_warnings pipescope_core pipescope_traces pipescope_sim ppsim_commands
       NAMESPACE pipescope_prebuilt:: FILE ${PROJECT_BINARY_DIR}/pipescope-prebuilt-targets.cmake)
file(CONFIGURE OUTPUT ${PROJECT_BINARY_DIR}/pipescope-prebuilt.cmake @ONLY CONTENT [[
# Written by pipescope's build (cmake/PipescopePrebuilt.cmake): its libraries as imported targets.
if(NOT "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}" STREQUAL "@CMAKE_CXX_COMPILER_ID@ @CMAKE_CXX_COMPILER_VERSION@")
  message(FATAL_ERROR "pipescope: PIPESCOPE_PREBUILT_DIR @PROJECT_BINARY_DIR@ was built with @CMAKE_CXX_COMPILER_ID@ @CMAKE_CXX_COMPILER_VERSION@, not ${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER_VERSION}")
endif()
find_package(nlohmann_json 3.10 REQUIRED)
find_package(fmt REQUIRED)
find_package(Boost 1.74 REQUIRED COMPONENTS program_options)
find_package(ZLIB REQUIRED)
if(@PIPESCOPE_TRACES_USE_SIMDJSON@)
  find_package(simdjson REQUIRED)
endif()
include("${CMAKE_CURRENT_LIST_DIR}/pipescope-prebuilt-targets.cmake")
]])
