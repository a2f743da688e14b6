#!/usr/bin/env bash
# Reads `nvcc -Xptxas -v` output on stdin and prints one line per kernel:
# registers, spill stores and loads (bytes), stack frame (bytes); then how many
# kernels spill. Used by `make ptxas-report`.
c++filt | awk '
  BEGIN { printf "%-5s %-9s %-9s %-6s %s\n", "regs", "spill-st", "spill-ld", "stack", "kernel" }
  /Compiling entry function/ { name = $0; sub(/^[^'"'"']*'"'"'/, "", name); sub(/'"'"' for .*$/, "", name) }
  /bytes stack frame/ { stack = $1; stores = $5; loads = $9 }
  /Used [0-9]+ registers/ && name != "" {
    regs = $0; sub(/^.*Used /, "", regs); sub(/ registers.*$/, "", regs)
    printf "%-5s %-9s %-9s %-6s %s\n", regs, stores, loads, stack, name
    if (stores + loads > 0) spilling++
    kernels++; name = ""
  }
  END { printf "%d kernels, %d with spills\n", kernels, spilling }
'
