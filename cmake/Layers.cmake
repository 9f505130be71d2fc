# loom_library: declares a library of one layer (cmake/layers.txt) and the libraries it links.
#
#   loom_library(NAME LAYER layer [INTERFACE] SOURCES ... DEPENDS ... [PRIVATE_DEPENDS ...])
#
# DEPENDS are linked PUBLIC, PRIVATE_DEPENDS PRIVATE. Every Loom library among them (a target
# declared with loom_library) must belong to the layer itself or to one the table lets it include;
# loom_check_layers(), called once at the end of the top-level CMakeLists.txt, fails the configure
# naming the library and the dependency otherwise. The layering test checks the #include lines.

file(STRINGS ${CMAKE_SOURCE_DIR}/cmake/layers.txt loom_layer_lines)
foreach(line IN LISTS loom_layer_lines)
  if(line MATCHES "^([a-z]+):(.*)$")
    string(STRIP "${CMAKE_MATCH_2}" allowed)
    separate_arguments(allowed UNIX_COMMAND "${allowed}")
    set_property(GLOBAL PROPERTY LOOM_LAYER_ALLOWS_${CMAKE_MATCH_1} "${allowed}")
  endif()
endforeach()

function(loom_library name)
  cmake_parse_arguments(ARG "INTERFACE" "LAYER" "SOURCES;DEPENDS;PRIVATE_DEPENDS" ${ARGN})
  get_property(known GLOBAL PROPERTY LOOM_LAYER_ALLOWS_${ARG_LAYER} SET)
  if(NOT known)
    message(FATAL_ERROR "loom_library(${name}): '${ARG_LAYER}' is no layer of cmake/layers.txt")
  endif()
  if(ARG_INTERFACE)
    add_library(${name} INTERFACE)
    target_include_directories(${name} INTERFACE ${CMAKE_SOURCE_DIR})
    target_link_libraries(${name} INTERFACE ${ARG_DEPENDS})
  else()
    add_library(${name} ${ARG_SOURCES})
    target_include_directories(${name} PUBLIC ${CMAKE_SOURCE_DIR})
    target_link_libraries(${name} PUBLIC ${ARG_DEPENDS} PRIVATE ${ARG_PRIVATE_DEPENDS})
  endif()
  set_property(TARGET ${name} PROPERTY LOOM_LAYER ${ARG_LAYER})
  set_property(TARGET ${name} PROPERTY LOOM_LAYER_DEPENDS ${ARG_DEPENDS} ${ARG_PRIVATE_DEPENDS})
  set_property(GLOBAL APPEND PROPERTY LOOM_LIBRARIES ${name})
endfunction()

function(loom_check_layers)
  get_property(libraries GLOBAL PROPERTY LOOM_LIBRARIES)
  foreach(library IN LISTS libraries)
    get_property(layer TARGET ${library} PROPERTY LOOM_LAYER)
    get_property(allowed GLOBAL PROPERTY LOOM_LAYER_ALLOWS_${layer})
    get_property(dependencies TARGET ${library} PROPERTY LOOM_LAYER_DEPENDS)
    foreach(dependency IN LISTS dependencies)
      if(NOT TARGET ${dependency})
        continue()
      endif()
      get_property(dependency_layer TARGET ${dependency} PROPERTY LOOM_LAYER)
      if(NOT dependency_layer OR dependency_layer STREQUAL layer)
        continue()
      endif()
      if(NOT dependency_layer IN_LIST allowed)
        message(FATAL_ERROR "${library} (layer ${layer}) links ${dependency} (layer "
                            "${dependency_layer}), which cmake/layers.txt does not allow ${layer}")
      endif()
    endforeach()
  endforeach()
endfunction()
