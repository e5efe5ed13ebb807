# cmake -DACTION=install -DBUILD=DIR -DPREFIX=DIR -P consumer.cmake: a fresh install of BUILD.
# cmake -DACTION=consume -DPREFIX=DIR -DSOURCE=DIR -DBINARY=DIR -DTARGET=NAME [-DRUN_ARGS='ARG ...']
#   -DGENERATOR=... -DCXX_COMPILER=... [-DCOMPILER_LAUNCHER=...] [-DBUILD_TYPE=...] -P consumer.cmake:
#   configures SOURCE as an outside project that finds pipescope in PREFIX alone, builds TARGET
#   and runs it with RUN_ARGS.
cmake_minimum_required(VERSION 3.22)

function(run)
  execute_process(COMMAND ${ARGN} COMMAND_ECHO STDOUT COMMAND_ERROR_IS_FATAL ANY)
endfunction()

if(ACTION STREQUAL "install")
  file(REMOVE_RECURSE ${PREFIX})
  run(${CMAKE_COMMAND} --install ${BUILD} --prefix ${PREFIX})
elseif(ACTION STREQUAL "consume")
  file(REMOVE_RECURSE ${BINARY})
  set(configure -S ${SOURCE} -B ${BINARY} -G ${GENERATOR} -DCMAKE_PREFIX_PATH=${PREFIX}
                -DCMAKE_CXX_COMPILER=${CXX_COMPILER} -DCMAKE_BUILD_TYPE=${BUILD_TYPE})
  if(COMPILER_LAUNCHER)
    list(APPEND configure -DCMAKE_CXX_COMPILER_LAUNCHER=${COMPILER_LAUNCHER})
  endif()
  run(${CMAKE_COMMAND} ${configure})
  run(${CMAKE_COMMAND} --build ${BINARY} --target ${TARGET})
  separate_arguments(args UNIX_COMMAND "${RUN_ARGS}")
  run(${BINARY}/${TARGET} ${args})
else()
  message(FATAL_ERROR "consumer.cmake: ACTION must be install or consume")
endif()
