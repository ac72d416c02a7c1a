# Runs the manifest generator; its outputs are build products under ${CUWIRE_GEN_DIR}.
set(CUWIRE_MANIFEST ${PROJECT_SOURCE_DIR}/protocol/driver.manifest)
set(CUWIRE_GENERATOR ${PROJECT_SOURCE_DIR}/protocol/gen/generate.py)
set(CUWIRE_GEN_DIR ${PROJECT_BINARY_DIR}/generated)
set(CUWIRE_GEN_OUTPUTS
  ${CUWIRE_GEN_DIR}/call_ids.h
  ${CUWIRE_GEN_DIR}/call_ids.cc
  ${CUWIRE_GEN_DIR}/driver_api.h
  ${CUWIRE_GEN_DIR}/cuda_driver_api.cc
  ${CUWIRE_GEN_DIR}/client_stubs.cc
  ${CUWIRE_GEN_DIR}/proc_table.cc
  ${CUWIRE_GEN_DIR}/server_dispatch.cc
  ${CUWIRE_GEN_DIR}/roundtrip_test.cc
  ${CUWIRE_GEN_DIR}/error_table.cc
  ${CUWIRE_GEN_DIR}/coverage.txt)
add_custom_command(
  OUTPUT ${CUWIRE_GEN_OUTPUTS}
  COMMAND ${Python3_EXECUTABLE} ${CUWIRE_GENERATOR} ${CUWIRE_MANIFEST} ${CUWIRE_GEN_DIR}
          --coverage --cuda-h ${CUWIRE_CUDA_INCLUDE}/cuda.h
  # The generator rewrites only changed files; touch them all so the rule is satisfied.
  COMMAND ${CMAKE_COMMAND} -E touch ${CUWIRE_GEN_OUTPUTS}
  DEPENDS ${CUWIRE_MANIFEST} ${CUWIRE_GENERATOR}
  COMMENT "Generating call plumbing from the driver manifest"
  VERBATIM)
add_custom_target(cuwire_generate DEPENDS ${CUWIRE_GEN_OUTPUTS})

# Generated headers, cuda.h, and the call ids every side shares.
add_library(cuwire_generated STATIC ${CUWIRE_GEN_DIR}/call_ids.cc ${CUWIRE_GEN_DIR}/error_table.cc)
add_dependencies(cuwire_generated cuwire_generate)
target_link_libraries(cuwire_generated PUBLIC cuwire_cuda_headers cuwire_protocol)
