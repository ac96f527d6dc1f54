package bench

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteTable writes the report as a Markdown table, preceded by the
// machine and followed by the notes, so that it reads in a terminal and
// pastes into a README.
func (r *Report) WriteTable(w io.Writer, command string) error {
	var b strings.Builder
	m := r.Machine
	fmt.Fprintf(&b, "Machine: %d CPUs, %s; %s; %s %s\n", m.CPUs, m.CPUModel, m.Postgres, m.Go, m.OS)
	if m.Settings != "" {
		fmt.Fprintf(&b, "Server settings: %s\n", m.Settings)
	}
	if m.Fsync != "" {
		fmt.Fprintf(&b, "Commit time: %s\n", m.Fsync)
	}
	if command != "" {
		fmt.Fprintf(&b, "Command: %s\n", command)
	}
	b.WriteString("\n| measure | figure | baseline (same run, same database) | ratio | target | met |\n")
	b.WriteString("| --- | ---: | --- | ---: | --- | --- |\n")
	for i, row := range r.Rows {
		note := ""
		if row.Note != "" {
			note = fmt.Sprintf(" [%d]", i+1)
		}
		fmt.Fprintf(&b, "| %s%s | %s %s | %s: %s | %s | %s | %s |\n",
			row.Measure, note, number(row.Figure), row.Unit, row.Baseline, number(row.BaselineFigure), ratio(row.Ratio), row.Target, yesNo(row.Met))
	}
	notes := false
	for i, row := range r.Rows {
		if row.Note == "" {
			continue
		}
		if !notes {
			b.WriteString("\n")
			notes = true
		}
		fmt.Fprintf(&b, "[%d] %s\n", i+1, row.Note)
	}
	fmt.Fprintf(&b, "\nTook %s.\n", r.Took.Round(time.Second))
	_, err := io.WriteString(w, b.String())
	return err
}

func number(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

// ratio writes a share in whole percent, or, below 10%, where a cost's
// target may lie, with the decimals that tell it from its neighbours.
func ratio(r float64) string {
	switch {
	case r > 0 && r < 0.01:
		return fmt.Sprintf("%.2f%%", 100*r)
	case r > 0 && r < 0.1:
		return fmt.Sprintf("%.1f%%", 100*r)
	}
	return fmt.Sprintf("%.0f%%", 100*r)
}

func yesNo(ok bool) string {
	if ok {
		return "yes"
	}
	return "**no**"
}
