package benchkit

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
)

// Median returns the median of xs, the mean of the middle two for an even
// count. It sorts xs.
func Median(xs []float64) float64 {
	slices.Sort(xs)
	n := len(xs)
	if n%2 == 1 {
		return xs[n/2]
	}
	return (xs[n/2-1] + xs[n/2]) / 2
}

// Ratio formats ours/base with two decimals, or "-" if base is zero.
func Ratio(ours, base float64) string {
	if base == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2f", ours/base)
}

// A Table is a report's table, in cells of text.
type Table struct {
	Header []string
	Right  []bool // whether a column is right-aligned
	Rows   [][]string
	// Errs holds, for a failed row, the error shown from column ErrCol on;
	// it is empty for the other rows.
	Errs   []string
	ErrCol int
}

// Add appends a row.
func (t *Table) Add(cells ...string) {
	t.Rows = append(t.Rows, cells)
	t.Errs = append(t.Errs, "")
}

// AddError appends a failed row: the cells before ErrCol, then msg.
func (t *Table) AddError(msg string, cells ...string) {
	t.Rows = append(t.Rows, append(cells, make([]string, len(t.Header)-len(cells))...))
	t.Errs = append(t.Errs, msg)
}

// WriteText writes t as aligned columns of plain text.
func (t *Table) WriteText(w io.Writer) {
	widths := make([]int, len(t.Header))
	for i, h := range t.Header {
		widths[i] = len(h)
	}
	for i, row := range t.Rows {
		for j, c := range row {
			if t.Errs[i] != "" && j >= t.ErrCol {
				break
			}
			widths[j] = max(widths[j], len(c))
		}
	}
	line := func(cells []string, errMsg string) {
		var b strings.Builder
		for j, c := range cells {
			if j > 0 {
				b.WriteString("  ")
			}
			if errMsg != "" && j == t.ErrCol {
				b.WriteString(errMsg)
				break
			}
			pad := strings.Repeat(" ", widths[j]-len(c))
			if t.Right[j] {
				b.WriteString(pad + c)
			} else {
				b.WriteString(c + pad)
			}
		}
		fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
	}
	line(t.Header, "")
	for i, row := range t.Rows {
		line(row, t.Errs[i])
	}
}

// WriteMarkdown writes t as a Markdown table.
func (t *Table) WriteMarkdown(w io.Writer) {
	fmt.Fprintf(w, "| %s |\n", strings.Join(t.Header, " | "))
	aligns := make([]string, len(t.Header))
	for j := range aligns {
		aligns[j] = ":---"
		if t.Right[j] {
			aligns[j] = "---:"
		}
	}
	fmt.Fprintf(w, "|%s|\n", strings.Join(aligns, "|"))
	for i, row := range t.Rows {
		cells := slices.Clone(row)
		if t.Errs[i] != "" {
			cells[t.ErrCol] = MarkdownEscape(t.Errs[i])
		}
		fmt.Fprintf(w, "| %s |\n", strings.Join(cells, " | "))
	}
}

// MarkdownEscape makes s safe inside a Markdown table cell.
func MarkdownEscape(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ", "<", "&lt;", ">", "&gt;").Replace(s)
}

// FormatSize writes a byte count the short way: 64 B, 1 KiB, 100 KiB.
func FormatSize(n int) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

// Plural returns "s" unless n is 1.
func Plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// Machine describes this machine for a report: CPUs, kernel and Go.
func Machine() string {
	return fmt.Sprintf("%d CPUs (%s), Linux %s, %s %s/%s",
		runtime.NumCPU(), CPUModel(), KernelRelease(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// CPUModel returns the CPU model Linux reports, or "unknown CPU".
func CPUModel() string {
	data, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.Lines(string(data)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.Join(strings.Fields(v), " ")
		}
	}
	return "unknown CPU"
}

// KernelRelease returns the running kernel's release, or "unknown".
func KernelRelease() string {
	data, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(data))
}

// WriteFile creates path, and its directory if need be, with what write
// writes.
func WriteFile(path string, write func(io.Writer) error) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// WriteReport writes a runner's Markdown report to md and its SVG plot to
// svg, each if its path is not empty, and names on w what it wrote. A
// quick run asked for neither writes both into the directory tmp anyway,
// so that CI's quick pass exercises all of the runner, and discards them.
func WriteReport(w io.Writer, quick bool, tmp, md, svg string, writeMD, writeSVG func(io.Writer) error) error {
	discard := quick && md == "" && svg == ""
	if discard {
		md, svg = filepath.Join(tmp, "report.md"), filepath.Join(tmp, "plot.svg")
	}
	if svg != "" {
		if err := WriteFile(svg, writeSVG); err != nil {
			return err
		}
	}
	if md != "" {
		if err := WriteFile(md, writeMD); err != nil {
			return err
		}
	}
	if discard {
		fmt.Fprintln(w, "quick run: report and plot written to a temporary directory and discarded")
		return nil
	}
	for _, path := range []string{md, svg} {
		if path != "" {
			fmt.Fprintf(w, "wrote %s\n", path)
		}
	}
	return nil
}
