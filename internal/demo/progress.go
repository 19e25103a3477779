package demo

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// progress shows how a run advances: a redrawn bar on a terminal, a plain line every few
// seconds otherwise (CI logs, pipes).
type progress struct {
	w        io.Writer
	tty      bool
	last     time.Time
	lastLine string
	drawn    bool
}

func newProgress(w io.Writer, tty bool) *progress { return &progress{w: w, tty: tty} }

// update reports done of total and a status text.
func (p *progress) update(phase string, done, total int, status string) {
	if p.w == nil {
		return
	}
	now := time.Now()
	if p.tty {
		if now.Sub(p.last) < 100*time.Millisecond {
			return
		}
		const width = 24
		filled := 0
		if total > 0 {
			filled = min(width, done*width/total)
		}
		bar := strings.Repeat("█", filled) + strings.Repeat("░", width-filled)
		line := []rune(fmt.Sprintf("%-9s %s %4d/%-4d %s", phase, bar, done, total, status))
		if cols := columns(); len(line) >= cols {
			line = append(line[:cols-2], '…') // one line, or \r cannot redraw it
		}
		fmt.Fprintf(p.w, "\r\033[K%s", string(line))
		p.drawn = true
		p.last = now
		return
	}
	line := fmt.Sprintf("%s: %d/%d %s", phase, done, total, status)
	if now.Sub(p.last) < 3*time.Second || line == p.lastLine {
		return
	}
	fmt.Fprintln(p.w, line)
	p.last, p.lastLine = now, line
}

// finish ends the phase's progress display with a final line.
func (p *progress) finish(line string) {
	if p.w == nil {
		return
	}
	if p.tty && p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
	}
	p.drawn = false
	p.last = time.Time{}
	fmt.Fprintln(p.w, line)
}

// say prints a line (clearing a bar first).
func (p *progress) say(format string, args ...any) {
	if p.w == nil {
		return
	}
	if p.tty && p.drawn {
		fmt.Fprint(p.w, "\r\033[K")
		p.drawn = false
		p.last = time.Time{}
	}
	fmt.Fprintf(p.w, format+"\n", args...)
}

// columns is the terminal width from $COLUMNS, 80 when unknown.
func columns() int {
	if n, err := strconv.Atoi(os.Getenv("COLUMNS")); err == nil && n >= 40 {
		return n
	}
	return 80
}
