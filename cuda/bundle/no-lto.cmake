# Included after MLX's project() when the bundle builds the Python bindings
# (CMAKE_PROJECT_mlx_INCLUDE, cmake-defines-python.txt). nanobind_add_module(... LTO ...) turns
# interprocedural optimization on for Release; the GPU image's GCC has no lto-wrapper, so the
# module's link fails. At the end of MLX's top-level CMakeLists this turns it off for every target.
function(_bundle_no_lto dir)
  get_property(targets DIRECTORY "${dir}" PROPERTY BUILDSYSTEM_TARGETS)
  foreach(t IN LISTS targets)
    get_target_property(kind ${t} TYPE)
    if(NOT kind STREQUAL "INTERFACE_LIBRARY" AND NOT kind STREQUAL "UTILITY")
      set_target_properties(${t} PROPERTIES INTERPROCEDURAL_OPTIMIZATION OFF
        INTERPROCEDURAL_OPTIMIZATION_RELEASE OFF INTERPROCEDURAL_OPTIMIZATION_MINSIZEREL OFF)
    endif()
  endforeach()
  get_property(subdirs DIRECTORY "${dir}" PROPERTY SUBDIRECTORIES)
  foreach(d IN LISTS subdirs)
    _bundle_no_lto("${d}")
  endforeach()
endfunction()
function(_bundle_no_lto_all)
  _bundle_no_lto("${CMAKE_SOURCE_DIR}")
endfunction()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL _bundle_no_lto_all)
