// Package benchkit is what the benchmark runners under benchmarks/ share:
// starting pinned server and client processes of the echo command (or of
// any other program) and parsing what they print, reading what the kernel
// counted of a process (context switches, CPU time), medians, tables in
// text and Markdown, and a hand-written SVG line plot.
//
// A runner measures contenders side by side in one run, each run a fresh
// server process on ServerCPU and a client process on ClientCPU, and
// quotes medians over rounds and ratios to a baseline measured in the same
// run: on the shared virtual machines these benchmarks run on, only such
// ratios are worth quoting (see docs/benchmarks.md).
package benchkit
