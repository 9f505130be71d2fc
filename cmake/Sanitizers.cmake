# LOOM_SANITIZE=thread builds everything with ThreadSanitizer; LOOM_SANITIZE=address with
# AddressSanitizer and UndefinedBehaviorSanitizer. Used by `make test-tsan` and `make test-asan`.
if(LOOM_SANITIZE STREQUAL "thread")
  add_compile_options(-fsanitize=thread -g -O1)
  add_link_options(-fsanitize=thread)
elseif(LOOM_SANITIZE STREQUAL "address")
  add_compile_options(-fsanitize=address,undefined -fno-sanitize-recover=undefined
                      -fno-omit-frame-pointer -g -O1)
  add_link_options(-fsanitize=address,undefined)
elseif(NOT LOOM_SANITIZE STREQUAL "" AND NOT LOOM_SANITIZE STREQUAL "OFF")
  message(FATAL_ERROR "LOOM_SANITIZE must be '', 'thread' or 'address', not '${LOOM_SANITIZE}'")
endif()
