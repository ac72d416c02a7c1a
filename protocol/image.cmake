# CUDA module image parsing (protocol/image.h): used by the client shim to size images and by
# the server to pull PTX and kernel metadata out of them. Included by protocol/CMakeLists.txt.
add_library(cuwire_image STATIC ${CMAKE_CURRENT_LIST_DIR}/image.cc)
target_link_libraries(cuwire_image PRIVATE ${CUWIRE_COMPRESSION_LIBS})
