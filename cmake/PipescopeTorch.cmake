# The LibTorch that pipescope::exec links, as one imported target: pipescope::torch.
#
# In:  PIPESCOPE_TORCH_DIR  a LibTorch folder (include/, lib/, share/cmake/): scripts/fetch-libtorch.sh
#                           unpacks PyPI's torch wheel into build/libtorch, the default. A LibTorch
#                           archive from pytorch.org or a Python environment's site-packages/torch
#                           have the same layout and can be named instead.
#      PIPESCOPE_WITH_CUDA  ON: the CUDA build, which goes through the LibTorch's own CMake package
#                           (it looks for the CUDA toolkit, which that build needs anyway).
# Out: pipescope::torch, PIPESCOPE_TORCH_FOUND, PIPESCOPE_TORCH_VERSION, and
#      PIPESCOPE_TORCH_NOT_FOUND (one line saying what is missing) when not found.
#
# Why not the LibTorch's own TorchConfig.cmake for the CPU build: the wheel's package describes the
# CUDA build and looks for the CUDA toolkit, cuDNN and NVTX, which a CPU machine lacks. The CPU
# build needs only libtorch_cpu.so and libc10.so (not libtorch_cuda.so: no cuBLAS, no cuDNN), the
# headers, and the compile definitions the torch_cpu target carries (USE_DISTRIBUTED,
# USE_C10D_GLOO ...: they switch on the c10d declarations pprun uses), read from the package so
# that they follow the wheel. The wheel is built with the C++11 string ABI (its symbols name
# std::__cxx11); the definition is set so that a compiler defaulting otherwise still matches.
# This file is also installed: pipescope-config.cmake includes it so that users of the installed
# pipescope::exec get the same target.
include_guard(GLOBAL)

set(PIPESCOPE_TORCH_FOUND FALSE)
set(PIPESCOPE_TORCH_NOT_FOUND "")
set(_pipescope_torch_package "${PIPESCOPE_TORCH_DIR}/share/cmake/Torch/TorchConfigVersion.cmake")
if(NOT EXISTS "${_pipescope_torch_package}")
  set(PIPESCOPE_TORCH_NOT_FOUND "no LibTorch in PIPESCOPE_TORCH_DIR='${PIPESCOPE_TORCH_DIR}' (no share/cmake/Torch)")
  return()
endif()
include("${_pipescope_torch_package}")  # sets PACKAGE_VERSION
set(PIPESCOPE_TORCH_VERSION ${PACKAGE_VERSION})

add_library(pipescope::torch INTERFACE IMPORTED)
if(PIPESCOPE_WITH_CUDA)
  # Caffe2_DIR: Debian's own Caffe2 package under /usr must never mix with this LibTorch's.
  set(Caffe2_DIR "${PIPESCOPE_TORCH_DIR}/share/cmake/Caffe2" CACHE PATH "Caffe2 package of PIPESCOPE_TORCH_DIR" FORCE)
  find_package(Torch REQUIRED PATHS "${PIPESCOPE_TORCH_DIR}/share/cmake/Torch" NO_DEFAULT_PATH)
  target_link_libraries(pipescope::torch INTERFACE ${TORCH_LIBRARIES})
  target_compile_options(pipescope::torch INTERFACE ${TORCH_CXX_FLAGS})
  set(PIPESCOPE_TORCH_FOUND TRUE)
  return()
endif()

foreach(_pipescope_torch_lib torch_cpu c10)
  set(_pipescope_torch_file "${PIPESCOPE_TORCH_DIR}/lib/lib${_pipescope_torch_lib}.so")
  if(NOT EXISTS "${_pipescope_torch_file}")
    set(PIPESCOPE_TORCH_NOT_FOUND "${_pipescope_torch_file} is missing (run scripts/fetch-libtorch.sh)")
    return()
  endif()
  add_library(pipescope::torch_${_pipescope_torch_lib} SHARED IMPORTED)
  set_target_properties(pipescope::torch_${_pipescope_torch_lib} PROPERTIES
                        IMPORTED_LOCATION "${_pipescope_torch_file}" IMPORTED_SONAME "lib${_pipescope_torch_lib}.so")
endforeach()
# The compile definitions of the torch_cpu target, as the wheel's Caffe2Targets.cmake states them.
file(STRINGS "${PIPESCOPE_TORCH_DIR}/share/cmake/Caffe2/Caffe2Targets.cmake" _pipescope_torch_targets)
set(_pipescope_torch_definitions "")
set(_pipescope_torch_in_cpu FALSE)
foreach(_pipescope_torch_line IN LISTS _pipescope_torch_targets)
  if(_pipescope_torch_line MATCHES "^set_target_properties\\(torch_cpu PROPERTIES")
    set(_pipescope_torch_in_cpu TRUE)
  elseif(_pipescope_torch_in_cpu AND _pipescope_torch_line MATCHES "^\\)")
    break()
  elseif(_pipescope_torch_in_cpu AND _pipescope_torch_line MATCHES "INTERFACE_COMPILE_DEFINITIONS \"([^\"]*)\"")
    set(_pipescope_torch_definitions "${CMAKE_MATCH_1}")
  endif()
endforeach()
# System includes: LibTorch's headers are not held to pipescope's warning flags.
target_include_directories(pipescope::torch SYSTEM INTERFACE "${PIPESCOPE_TORCH_DIR}/include"
                           "${PIPESCOPE_TORCH_DIR}/include/torch/csrc/api/include")
target_compile_definitions(pipescope::torch INTERFACE ${_pipescope_torch_definitions} _GLIBCXX_USE_CXX11_ABI=1)
target_compile_features(pipescope::torch INTERFACE cxx_std_17)
target_link_libraries(pipescope::torch INTERFACE pipescope::torch_torch_cpu pipescope::torch_c10)
set(PIPESCOPE_TORCH_FOUND TRUE)
