# The Python and pybind11 that the module pipescope._core (python/) is built with.
#
# In:  Python_EXECUTABLE  the interpreter, when named; otherwise the first python3 on PATH that
#                         imports pytest (the one the tests can run with: a pyenv or conda python
#                         ahead of Debian's on PATH usually has no pytest), else FindPython's.
# Out: PIPESCOPE_PYTHON_FOUND, pybind11's targets, Python_EXECUTABLE, PIPESCOPE_PYTHON_HAS_PYTEST,
#      and PIPESCOPE_PYTHON_NOT_FOUND (one line saying what is missing) when not found.
#
# Used by the top-level build (PIPESCOPE_WITH_PYTHON: without Python's headers or pybind11 the
# rest builds as before) and by python/CMakeLists.txt when the Python build backend configures
# that folder alone (it then requires both).
include_guard(GLOBAL)

set(PIPESCOPE_PYTHON_FOUND FALSE)
set(PIPESCOPE_PYTHON_NOT_FOUND "")
set(PIPESCOPE_PYTHON_HAS_PYTEST FALSE)

if(NOT Python_EXECUTABLE AND NOT SKBUILD)
  string(REPLACE ":" ";" _pipescope_python_path "$ENV{PATH}")
  foreach(_pipescope_python_dir IN LISTS _pipescope_python_path)
    if(EXISTS "${_pipescope_python_dir}/python3")
      execute_process(COMMAND "${_pipescope_python_dir}/python3" -c "import pytest"
                      RESULT_VARIABLE _pipescope_python_status OUTPUT_QUIET ERROR_QUIET)
      if(_pipescope_python_status EQUAL 0)
        set(Python_EXECUTABLE "${_pipescope_python_dir}/python3" CACHE FILEPATH "Python interpreter")
        break()
      endif()
    endif()
  endforeach()
endif()

find_package(Python 3.9 QUIET COMPONENTS Interpreter Development.Module)
if(NOT Python_FOUND)
  set(PIPESCOPE_PYTHON_NOT_FOUND "no Python 3.9+ interpreter with its headers (Debian: python3-dev)")
  return()
endif()
# pybind11's CMake files: those of the Python package the build backend installed (pip's
# isolated build), else the system's (Debian's pybind11-dev).
execute_process(COMMAND "${Python_EXECUTABLE}" -c "import pybind11; print(pybind11.get_cmake_dir())"
                OUTPUT_VARIABLE _pipescope_pybind11_dir OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
find_package(pybind11 2.10 CONFIG QUIET HINTS ${_pipescope_pybind11_dir})
if(NOT pybind11_FOUND)
  set(PIPESCOPE_PYTHON_NOT_FOUND "no pybind11 2.10+ for ${Python_EXECUTABLE} (Debian: pybind11-dev)")
  return()
endif()
execute_process(COMMAND "${Python_EXECUTABLE}" -c "import pytest" RESULT_VARIABLE _pipescope_python_status
                OUTPUT_QUIET ERROR_QUIET)
if(_pipescope_python_status EQUAL 0)
  set(PIPESCOPE_PYTHON_HAS_PYTEST TRUE)
endif()
set(PIPESCOPE_PYTHON_FOUND TRUE)
