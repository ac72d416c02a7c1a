# Locates the CUDA toolkit (nvcc and cuda.h) through CUDA_HOME or nvcc on the PATH.
# No real driver is needed: cuwire builds and runs on machines without a GPU.
if(DEFINED ENV{CUDA_HOME} AND EXISTS "$ENV{CUDA_HOME}/bin/nvcc")
  set(CUWIRE_CUDA_HOME "$ENV{CUDA_HOME}")
else()
  find_program(CUWIRE_NVCC_ON_PATH nvcc PATHS /usr/local/cuda/bin)
  if(CUWIRE_NVCC_ON_PATH)
    get_filename_component(_nvcc_bin "${CUWIRE_NVCC_ON_PATH}" DIRECTORY)
    get_filename_component(CUWIRE_CUDA_HOME "${_nvcc_bin}" DIRECTORY)
  endif()
endif()
if(NOT CUWIRE_CUDA_HOME OR NOT EXISTS "${CUWIRE_CUDA_HOME}/include/cuda.h")
  message(FATAL_ERROR
    "CUDA toolkit not found: cuwire needs nvcc and cuda.h. Set CUDA_HOME to the toolkit "
    "(for example /usr/local/cuda) or put nvcc on the PATH.")
endif()
set(CUWIRE_NVCC "${CUWIRE_CUDA_HOME}/bin/nvcc")
set(CUWIRE_CUDA_INCLUDE "${CUWIRE_CUDA_HOME}/include")
message(STATUS "CUDA toolkit: ${CUWIRE_CUDA_HOME}")

# Header-only target for cuda.h; nothing links the vendor's libcuda.
add_library(cuwire_cuda_headers INTERFACE)
target_include_directories(cuwire_cuda_headers SYSTEM INTERFACE "${CUWIRE_CUDA_INCLUDE}")

# cuwire_nvcc(OUTPUT out KIND ptx|fatbin|cubin|exe SOURCE src [FLAGS ...])
# Compiles a CUDA source at build time. Kernels for the sim backend default to sm_75.
function(cuwire_nvcc)
  cmake_parse_arguments(A "" "OUTPUT;KIND;SOURCE" "FLAGS" ${ARGN})
  if(A_KIND STREQUAL "ptx")
    set(kind_flag -ptx -arch=compute_75)
  elseif(A_KIND STREQUAL "fatbin")
    set(kind_flag -fatbin -arch=sm_75)
  elseif(A_KIND STREQUAL "cubin")
    set(kind_flag -cubin -arch=sm_75)
  elseif(A_KIND STREQUAL "object")
    set(kind_flag -dc -arch=sm_75)
  elseif(A_KIND STREQUAL "library")
    set(kind_flag -lib -rdc=true -arch=sm_75)
  elseif(A_KIND STREQUAL "exe")
    set(kind_flag)
  else()
    message(FATAL_ERROR "cuwire_nvcc: unknown KIND ${A_KIND}")
  endif()
  add_custom_command(OUTPUT ${A_OUTPUT}
    COMMAND ${CUWIRE_NVCC} ${kind_flag} ${A_FLAGS} -o ${A_OUTPUT} ${A_SOURCE}
    DEPENDS ${A_SOURCE}
    COMMENT "nvcc ${A_KIND} ${A_SOURCE}"
    VERBATIM)
endfunction()
