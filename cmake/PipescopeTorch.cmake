# The LibTorch that pipescope::exec links, as one imported target: pipescope::torch.
#
# In:  PIPESCOPE_TORCH_DIR  a LibTorch folder (include/, lib/, share/cmake/): scripts/fetch-libtorch.sh
#                           unpacks PyPI's torch wheel into build/libtorch, the default. A LibTorch
#                           archive from pytorch.org or a Python environment's site-packages/torch
#                           have the same layout and can be named instead.
#      PIPESCOPE_WITH_CUDA  ON: also pipescope::torch_cuda, for the CUDA program beside the CPU one
#                           (libtorch_cuda, libc10_cuda and the CUDA toolkit's runtime).
# Out: pipescope::torch (and pipescope::torch_cuda), PIPESCOPE_TORCH_FOUND, PIPESCOPE_TORCH_VERSION,
#      and PIPESCOPE_TORCH_NOT_FOUND (one line saying what is missing) when not found.
#
# Why not the LibTorch's own TorchConfig.cmake: the wheel's package describes the CUDA build and
# looks for the CUDA toolkit, cuDNN and NVTX, which a CPU machine lacks, and it would give the CPU
# and the CUDA program different compile definitions, so that the sources they share would be
# compiled twice. Everything pprun compiles needs only libtorch_cpu.so and libc10.so, the
# headers, and the compile definitions the torch_cpu target carries (USE_DISTRIBUTED,
# USE_C10D_GLOO ...: they switch on the c10d declarations pprun uses), read from the package so
# that they follow the wheel; the two CUDA files add the CUDA libraries (torch_cuda's own
# definitions, USE_C10D_NCCL and USE_NVSHMEM, concern headers those files do not include). The wheel is built with the C++11 string ABI (its symbols name
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

# Sets PIPESCOPE_TORCH_NOT_FOUND when one of LibTorch's lib<name>.so is missing (`hint` says
# what to do), else imports each as pipescope::torch_<name>.
function(_pipescope_torch_import_libraries hint)
  foreach(name IN LISTS ARGN)
    set(file "${PIPESCOPE_TORCH_DIR}/lib/lib${name}.so")
    if(NOT EXISTS "${file}")
      set(PIPESCOPE_TORCH_NOT_FOUND "${file} is missing (${hint})" PARENT_SCOPE)
      return()
    endif()
    add_library(pipescope::torch_${name} SHARED IMPORTED)
    set_target_properties(pipescope::torch_${name} PROPERTIES IMPORTED_LOCATION "${file}" IMPORTED_SONAME "lib${name}.so")
  endforeach()
endfunction()

_pipescope_torch_import_libraries("run scripts/fetch-libtorch.sh" torch_cpu c10)
if(PIPESCOPE_TORCH_NOT_FOUND)
  return()
endif()
add_library(pipescope::torch INTERFACE IMPORTED)
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

if(PIPESCOPE_WITH_CUDA)
  _pipescope_torch_import_libraries("PIPESCOPE_WITH_CUDA=ON needs a CUDA LibTorch: scripts/build-cuda.sh" torch_cuda c10_cuda)
  if(PIPESCOPE_TORCH_NOT_FOUND)
    return()
  endif()
  find_package(CUDAToolkit REQUIRED)
  add_library(pipescope::torch_cuda INTERFACE IMPORTED)
  # libtorch_cuda registers the CUDA device with LibTorch when it loads; nothing names its
  # symbols, so a linker that drops unneeded libraries (--as-needed) must keep this one, as
  # LibTorch's own package does.
  target_link_libraries(pipescope::torch_cuda INTERFACE pipescope::torch
                        "-Wl,--no-as-needed,${PIPESCOPE_TORCH_DIR}/lib/libtorch_cuda.so" "-Wl,--as-needed"
                        pipescope::torch_c10_cuda CUDA::cudart)
endif()
set(PIPESCOPE_TORCH_FOUND TRUE)
