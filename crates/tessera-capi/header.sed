# Turns the Rust doc comments cbindgen copies into tessera.h into plain C documentation
# (sed -E; run by `make capi-header` and `make capi-header-check`):
# intra-doc links to functions become `name()`, other links the bare name;
s/\[`(crate::)?(tessera_[A-Za-z0-9_]+)`\](\([^)]*\))?/\2()/g
s/\[`(crate::)?([A-Za-z0-9_:]+)`\](\([^)]*\))?/\2/g
# a "# Safety" heading becomes a "Safety:" paragraph;
s/^( *\*|( *)\/\/) # Safety$/\1 Safety:/
# a fenced code block keeps its code and loses its fences.
/^ *\* ```/d
