# cmake/install.cmake: what `cmake --install` puts under the prefix: the
# headers (include/prism/...), libprism.a and libprism.so, the prism command,
# prism.pc for pkg-config and the CMake package (find_package(prism) gives
# prism::prism, the shared library, and prism::prism_static).
include(CMakePackageConfigHelpers)

set(PRISM_HEADER_EXCLUDE "")
if(NOT PRISM_HAVE_CUDA)
  set(PRISM_HEADER_EXCLUDE PATTERN cuda.h EXCLUDE) # it includes cuda_runtime.h
endif()
foreach(dir tensor autograd ops models optim train tasks dist)
  if(IS_DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR}/${dir})
    install(DIRECTORY ${dir} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/prism
            FILES_MATCHING PATTERN "*.h" PATTERN "*.def" ${PRISM_HEADER_EXCLUDE})
  endif()
endforeach()
install(TARGETS prism prism_shared EXPORT prismTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS prism_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# ---- the CMake package --------------------------------------------------------
set(PRISM_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/prism)
set(PRISM_CUDA_ROOT "")
if(PRISM_HAVE_CUDA)
  get_filename_component(PRISM_CUDA_ROOT "${CUDAToolkit_BIN_DIR}" DIRECTORY)
endif()
set(PRISM_NEEDS_OPENMP ${OpenMP_C_FOUND})
configure_package_config_file(cmake/prismConfig.cmake.in ${CMAKE_CURRENT_BINARY_DIR}/prismConfig.cmake
                              INSTALL_DESTINATION ${PRISM_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/prismConfigVersion.cmake
                                 COMPATIBILITY SameMajorVersion)
install(EXPORT prismTargets NAMESPACE prism:: DESTINATION ${PRISM_CMAKE_DIR})
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/prismConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/prismConfigVersion.cmake
        DESTINATION ${PRISM_CMAKE_DIR})

# ---- prism.pc -------------------------------------------------------------------
# Libs links the shared library; Libs.private lists what a static link adds.
# The prefix is found from the file's own place, so the install can move.
set(PC_CFLAGS "")
foreach(def ${PRISM_FEATURES})
  string(APPEND PC_CFLAGS " -D${def}")
endforeach()
set(PC_LIBS "")
if(PRISM_SANITIZE)
  set(PC_LIBS " -fsanitize=address -fsanitize=undefined")
endif()
set(PC_LIBS_PRIVATE "")
foreach(dep ${PRISM_DEPENDENCIES})
  if(dep STREQUAL "OpenMP::OpenMP_C")
    string(APPEND PC_LIBS_PRIVATE " ${OpenMP_C_FLAGS}")
  elseif(dep STREQUAL "CUDA::cudart")
    string(APPEND PC_CFLAGS " -I${CUDAToolkit_INCLUDE_DIRS}") # for tensor/cuda.h
    string(APPEND PC_LIBS_PRIVATE " -L${CUDAToolkit_LIBRARY_DIR} -lcudart")
  elseif(dep MATCHES "^CUDA::(.*)")
    string(APPEND PC_LIBS_PRIVATE " -l${CMAKE_MATCH_1}")
  elseif(IS_ABSOLUTE "${dep}")
    string(APPEND PC_LIBS_PRIVATE " ${dep}")
  else()
    string(APPEND PC_LIBS_PRIVATE " -l${dep}")
  endif()
endforeach()
file(RELATIVE_PATH PC_PREFIX_FROM_PCDIR /root/${CMAKE_INSTALL_LIBDIR}/pkgconfig /root)
string(REGEX REPLACE "/$" "" PC_PREFIX_FROM_PCDIR "${PC_PREFIX_FROM_PCDIR}")
configure_file(cmake/prism.pc.in ${CMAKE_CURRENT_BINARY_DIR}/prism.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/prism.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
