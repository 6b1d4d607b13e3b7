# Embeds Lua scripts into a C file with their SHA1 (what EVALSHA needs).
# Invoked as: cmake -DOUT=file.c -DSCRIPTS="a.lua;b.lua" -P embed_scripts.cmake
#
# Redis scripts cannot load code from each other, so shared fragments live
# in src/redis/scripts/include/ and a script pulls one in with a line of its
# own:
#     -- #include NAME.lua
# which is replaced by that file's text before the script is embedded (its
# SHA1 is the assembled text's). Fragments do not include fragments.
string(REPLACE "|" ";" SCRIPTS "${SCRIPTS}")
set(body "/* Generated from the .lua files in src/redis/scripts; do not edit. */\n#include \"redis/scripts.h\"\n\n")
foreach(path ${SCRIPTS})
  get_filename_component(name ${path} NAME_WE)
  get_filename_component(dir ${path} DIRECTORY)
  file(READ ${path} text)
  string(REGEX MATCHALL "-- #include [a-z_]+\\.lua" incs "${text}")
  foreach(inc ${incs})
    string(REGEX REPLACE "-- #include " "" frag "${inc}")
    if(NOT EXISTS ${dir}/include/${frag})
      message(FATAL_ERROR "${path}: no fragment ${dir}/include/${frag}")
    endif()
    file(READ ${dir}/include/${frag} fragtext)
    string(REPLACE "${inc}\n" "${fragtext}" text "${text}")
  endforeach()
  set(assembled ${OUT}.${name}.lua)
  file(WRITE ${assembled} "${text}")
  file(READ ${assembled} hex HEX)
  file(SHA1 ${assembled} sha)
  file(SIZE ${assembled} size)
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(APPEND body "static const char ${name}_body[] = {${bytes} 0};\n")
  string(APPEND body "const dlock__script dlock__script_${name} = {\"${name}\", ${name}_body, ${size}, \"${sha}\"};\n\n")
endforeach()
file(WRITE ${OUT}.tmp "${body}")
execute_process(COMMAND ${CMAKE_COMMAND} -E copy_if_different ${OUT}.tmp ${OUT})
