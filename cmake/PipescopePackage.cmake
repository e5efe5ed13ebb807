# The installed CMake package (find_package(pipescope)) and the Debian package (cpack -G DEB).
# Each folder installs its own targets into an export set named pipescope-<folder>-targets;
# this file writes those sets, the config file that loads them and the version file.
include(CMakePackageConfigHelpers)

set(PIPESCOPE_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/pipescope)

# Static libraries name their private link dependencies in their exported interface, and the
# warning flags are one of them; as a link-only dependency it gives users nothing.
install(TARGETS pipescope_warnings EXPORT pipescope-core-targets)
set_target_properties(pipescope_warnings PROPERTIES EXPORT_NAME warnings)

set(PIPESCOPE_PACKAGE_COMPONENTS core traces sim)
if(TARGET pipescope_exec)
  list(APPEND PIPESCOPE_PACKAGE_COMPONENTS exec)
  set(PIPESCOPE_PACKAGE_EXEC exec)
endif()
if(TARGET pipescope_exec)
  # pipescope::exec links pipescope::torch: the installed config defines it the same way.
  install(FILES ${CMAKE_CURRENT_LIST_DIR}/PipescopeTorch.cmake DESTINATION ${PIPESCOPE_INSTALL_CMAKEDIR})
endif()
foreach(component IN LISTS PIPESCOPE_PACKAGE_COMPONENTS)
  install(EXPORT pipescope-${component}-targets NAMESPACE pipescope::
          DESTINATION ${PIPESCOPE_INSTALL_CMAKEDIR})
endforeach()

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/pipescope-config.cmake.in
                              ${PROJECT_BINARY_DIR}/pipescope-config.cmake
                              INSTALL_DESTINATION ${PIPESCOPE_INSTALL_CMAKEDIR})
# 0.x: a minor version may break the interface, so only the same minor version is compatible.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/pipescope-config-version.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/pipescope-config.cmake ${PROJECT_BINARY_DIR}/pipescope-config-version.cmake
        DESTINATION ${PIPESCOPE_INSTALL_CMAKEDIR})

# ---- Debian package: cpack -G DEB in the build folder --------------------------------------
set(CPACK_PACKAGE_NAME pipescope)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Pipeline-parallel training schedules: generate, validate, simulate, run, view")
set(CPACK_PACKAGE_DESCRIPTION "ppsim (schedules, simulator, planner, calibration), pprun (LibTorch executor), ppview (trace viewer), and the C++ libraries and headers behind them with a CMake package (find_package(pipescope)).")
set(PIPESCOPE_PACKAGE_CONTACT "pipescope maintainers <maintainers@pipescope.invalid>" CACHE STRING
    "Maintainer of the Debian package (Name <email>)")
set(CPACK_PACKAGE_CONTACT ${PIPESCOPE_PACKAGE_CONTACT})
set(CPACK_DEBIAN_PACKAGE_SECTION devel)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_STRIP_FILES ON)
# The programs' shared libraries, and the -dev packages the static libraries' users link against.
set(pipescope_deb_depends
    "libboost-program-options1.74.0" "libboost1.74-dev"
    "nlohmann-json3-dev (>= 3.10)" "libfmt-dev" "zlib1g-dev")
if(PIPESCOPE_TRACES_USE_SIMDJSON)
  list(APPEND pipescope_deb_depends "libsimdjson-dev")
endif()
if(TARGET pipescope_exec)
  # LibTorch is PyPI's (PIPESCOPE_TORCH_DIR, no Debian package); Gloo's headers are Debian's.
  list(APPEND pipescope_deb_depends "libgloo-dev")
endif()
if(TARGET ppview)
  list(APPEND pipescope_deb_depends "libqt6widgets6")
endif()
list(JOIN pipescope_deb_depends ", " CPACK_DEBIAN_PACKAGE_DEPENDS)
include(CPack)
