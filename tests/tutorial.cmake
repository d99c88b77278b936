# tests/tutorial.cmake: docs/TUTORIAL.md's C blocks become programs of the
# build, so the tutorial cannot go stale. A block opened with "```c NAME"
# becomes build/NAME; the block "```c tutorial_rule_row" is a row for
# ops/recurrence/rules.def, appended to a copy of that file which
# tutorial_new_rule (and its own copy of recurrence.c) is compiled against.
# The shell blocks run in the tests tutorial_commands_* (tests/tutorial.sh).
set(tutorial_md ${CMAKE_CURRENT_SOURCE_DIR}/docs/TUTORIAL.md)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${tutorial_md})
file(READ ${tutorial_md} tutorial_rest)
set(tutorial_rule_row "")
set(tutorial_programs "")
while(TRUE)
  string(FIND "${tutorial_rest}" "```c tutorial_" begin)
  if(begin EQUAL -1)
    break()
  endif()
  math(EXPR begin "${begin} + 5")
  string(SUBSTRING "${tutorial_rest}" ${begin} -1 tutorial_rest)
  string(FIND "${tutorial_rest}" "\n" eol)
  string(SUBSTRING "${tutorial_rest}" 0 ${eol} name)
  math(EXPR eol "${eol} + 1")
  string(SUBSTRING "${tutorial_rest}" ${eol} -1 tutorial_rest)
  string(FIND "${tutorial_rest}" "```" end)
  string(SUBSTRING "${tutorial_rest}" 0 ${end} code)
  string(SUBSTRING "${tutorial_rest}" ${end} -1 tutorial_rest)
  if(name STREQUAL "tutorial_rule_row")
    set(tutorial_rule_row "${code}")
  else()
    file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/${name}.c CONTENT "${code}" @ONLY)
    list(APPEND tutorial_programs ${name})
  endif()
endwhile()

# rules.def plus the tutorial's row, unless the reader has already added it to the tree
file(READ ${CMAKE_CURRENT_SOURCE_DIR}/ops/recurrence/rules.def rules_def)
set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/ops/recurrence/rules.def)
string(STRIP "${tutorial_rule_row}" row)
string(FIND "${rules_def}" "${row}" present)
if(present EQUAL -1)
  string(APPEND rules_def "${tutorial_rule_row}")
endif()
file(CONFIGURE OUTPUT ${CMAKE_CURRENT_BINARY_DIR}/tutorial_rules.def CONTENT "${rules_def}" @ONLY)

foreach(name ${tutorial_programs})
  add_executable(${name} ${CMAKE_CURRENT_BINARY_DIR}/${name}.c)
  target_compile_options(${name} PRIVATE ${PRISM_WARNINGS})
  target_link_libraries(${name} PRIVATE prism)
  if(PRISM_HAVE_CUDA)
    set_target_properties(${name} PROPERTIES LINKER_LANGUAGE CUDA)
  endif()
endforeach()
if(TARGET tutorial_new_rule)
  # its own recurrence.c, compiled against the longer rule list, stands in for the library's
  target_sources(tutorial_new_rule PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/ops/recurrence/recurrence.c)
  target_include_directories(tutorial_new_rule PRIVATE ${CMAKE_CURRENT_SOURCE_DIR})
  target_compile_definitions(tutorial_new_rule PRIVATE
                             "PR_RULES_DEF=\"${CMAKE_CURRENT_BINARY_DIR}/tutorial_rules.def\"")
endif()
# in three parts that run side by side (shell blocks 1-12, 13-15 and the rest);
# blocks 13 to 15 share a grid's folder, so they stay together
set(part_number 0)
foreach(blocks 1-12 13-15 16-999999)
  math(EXPR part_number "${part_number} + 1")
  add_test(NAME tutorial_commands_${part_number} COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/tutorial.sh
           ${tutorial_md} ${CMAKE_CURRENT_BINARY_DIR} ${blocks})
  set_tests_properties(tutorial_commands_${part_number} PROPERTIES LABELS cpu TIMEOUT 600)
endforeach()
