package doccheck

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/turnstile-locks/turnstile/internal/bench"
)

// root is the application module's root: the nearest directory up from the test's
// working directory that holds a go.mod.
func root(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's working directory")
		}
		dir = parent
	}
}

// userDocs are README.md and docs/*.md, relative to the root.
func userDocs(t *testing.T, root string) []string {
	t.Helper()
	docs, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files := []string{"README.md"}
	for _, d := range docs {
		rel, _ := filepath.Rel(root, d)
		files = append(files, rel)
	}
	return files
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// line is one line of a Markdown document, numbered from 1.
type line struct {
	n    int
	text string
}

// prose returns the lines of a Markdown document outside fenced code blocks, inline code
// spans blanked out.
func prose(md string) []line {
	var out []line
	inFence := false
	code := regexp.MustCompile("`[^`]*`")
	for i, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inFence = !inFence
			continue
		}
		if !inFence {
			out = append(out, line{i + 1, code.ReplaceAllString(l, "``")})
		}
	}
	return out
}

// anchors returns the GitHub anchors of a Markdown document's headings: lower case,
// everything but letters, digits, spaces, hyphens and underscores dropped, spaces turned
// into hyphens; a repeated anchor gets -1, -2, ...
func anchors(md string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inFence = !inFence
			continue
		}
		if inFence || !strings.HasPrefix(l, "#") {
			continue
		}
		text := strings.TrimSpace(strings.TrimLeft(l, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(text) {
			switch {
			case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
				b.WriteRune(r)
			case r == ' ':
				b.WriteRune('-')
			}
		}
		a := b.String()
		if n := seen[a]; n > 0 {
			out[fmt.Sprintf("%s-%d", a, n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

var link = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)

// TestRelativeLinks: every relative link in README.md and docs/*.md names a file or
// directory that exists, and a #fragment names a heading of the Markdown file it points at.
func TestRelativeLinks(t *testing.T) {
	root := root(t)
	checked := 0
	for _, doc := range userDocs(t, root) {
		md := read(t, filepath.Join(root, doc))
		for _, l := range prose(md) {
			n := l.n
			for _, m := range link.FindAllStringSubmatch(l.text, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				file, frag, _ := strings.Cut(target, "#")
				path := filepath.Join(root, doc)
				if file != "" {
					path = filepath.Join(filepath.Dir(path), filepath.FromSlash(file))
					if _, err := os.Stat(path); err != nil {
						t.Errorf("%s:%d: link %q: %v", doc, n, target, err)
						continue
					}
				}
				if frag == "" {
					continue
				}
				if !strings.HasSuffix(path, ".md") {
					t.Errorf("%s:%d: link %q: a fragment on a file that is not Markdown", doc, n, target)
					continue
				}
				if !anchors(read(t, path))[frag] {
					t.Errorf("%s:%d: link %q: %s has no heading with anchor #%s", doc, n, target, filepath.Base(path), frag)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("found no relative link at all: the link pattern is broken")
	}
}

func TestAnchors(t *testing.T) {
	got := anchors("# The demo (`make demo`)\n## 1. Choose a strategy\n## DynamoDB Local's TTL is not AWS's\n## Notes\n## Notes\n```\n# not a heading\n```\n")
	for _, want := range []string{"the-demo-make-demo", "1-choose-a-strategy", "dynamodb-locals-ttl-is-not-awss", "notes", "notes-1"} {
		if !got[want] {
			t.Errorf("anchor %q missing from %v", want, got)
		}
	}
	if got["not-a-heading"] {
		t.Error("a line in a code block was taken for a heading")
	}
}

// exampleHarness makes a file of the README's lockcore example: it is the body of a
// function that has a context ctx and a DynamoDB client db and returns an error.
const exampleHarness = `package example

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/turnstile-locks/turnstile/lockcore"
)

var (
	_ = errors.Is
	_ = fmt.Sprint
	_ = time.Second
)

func example(ctx context.Context, db *dynamodb.Client) error {
%s
	return err
}
`

// TestReadmeExampleCompiles: the README's lockcore example (its first Go block) compiles
// against this checkout's lockcore, as go vet sees it.
func TestReadmeExampleCompiles(t *testing.T) {
	root := root(t)
	md := read(t, filepath.Join(root, "README.md"))
	_, after, ok := strings.Cut(md, "\n```go\n")
	if !ok {
		t.Fatal("README.md has no Go example (a ```go block)")
	}
	snippet, _, ok := strings.Cut(after, "\n```")
	if !ok {
		t.Fatal("README.md's Go example does not end")
	}
	f := filepath.Join(t.TempDir(), "example.go")
	if err := os.WriteFile(f, []byte(fmt.Sprintf(exampleHarness, snippet)), 0o644); err != nil {
		t.Fatal(err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go command is needed to check the README's example: %v", err)
	}
	// Run from the module root, so lockcore resolves through go.mod's replace directive.
	cmd := exec.Command(goTool, "vet", f)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("the README's Go example does not compile: %v\n%s\n%s", err, out, read(t, f))
	}
}

// TestMakeTargetsDocumented: docs/layout.md's table lists every target `make help` lists
// (the Makefile's "target: ... ## help" lines), and names no target the Makefile lacks.
func TestMakeTargetsDocumented(t *testing.T) {
	root := root(t)
	f, err := os.Open(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	helpLine := regexp.MustCompile(`^([a-zA-Z0-9_.-]+):.*## `)
	var targets []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := helpLine.FindStringSubmatch(sc.Text()); m != nil {
			targets = append(targets, m[1])
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	if len(targets) < 10 {
		t.Fatalf("found %d targets in the Makefile: the pattern is broken", len(targets))
	}
	layout := read(t, filepath.Join(root, "docs", "layout.md"))
	var documented []string
	row := regexp.MustCompile("`make ([a-zA-Z0-9_.<>-]+)")
	for _, l := range strings.Split(layout, "\n") {
		if !strings.HasPrefix(l, "| `make ") {
			continue
		}
		cells := strings.Split(l, "|")
		for _, m := range row.FindAllStringSubmatch(cells[1], -1) {
			documented = append(documented, m[1])
		}
	}
	for _, tg := range targets {
		name := tg
		if strings.HasPrefix(tg, "build-") {
			name = "build-<LogicalId>"
		}
		if !slices.Contains(documented, name) {
			t.Errorf("docs/layout.md's make targets table lacks `make %s` (the Makefile documents it with ##)", name)
		}
	}
	for _, d := range documented {
		if d == "build-<LogicalId>" {
			continue
		}
		if !slices.Contains(targets, d) {
			t.Errorf("docs/layout.md lists `make %s`, which the Makefile does not document with ##", d)
		}
	}
}

// TestPerformanceTargetsMatchTheBench: docs/performance.md states the fan-out targets with
// the thresholds internal/bench checks (and draws on the chart).
func TestPerformanceTargetsMatchTheBench(t *testing.T) {
	root := root(t)
	doc := strings.Join(strings.Fields(read(t, filepath.Join(root, "docs", "performance.md"))), " ")
	for _, want := range []string{
		fmt.Sprintf("Jain ≥ %g", bench.TargetJain),
		fmt.Sprintf("efficiency ≥ %g,", bench.TargetEfficiency),
		fmt.Sprintf("efficiency ≥ %g for the best", bench.TargetBestEfficiency),
		fmt.Sprintf("≤ %g lock CU per critical section", float64(bench.TargetCheapLockCU)),
		fmt.Sprintf("at most %g × the 16-worker one", bench.TargetLockCUGrowth),
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("docs/performance.md does not say %q (internal/bench's target)", want)
		}
	}
}

// TestNoDevelopmentHistory: the user documentation describes the product, not how it was
// made; the history of passes, rounds and issues belongs in git.
func TestNoDevelopmentHistory(t *testing.T) {
	root := root(t)
	history := regexp.MustCompile(`(?i)\bissue #?\d+|\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|last|previous|next) (pass|round)\b|\bpass(es)? of\b|\bused to\b|\bformerly\b`)
	for _, doc := range userDocs(t, root) {
		for _, l := range prose(read(t, filepath.Join(root, doc))) {
			if m := history.FindString(l.text); m != "" {
				t.Errorf("%s:%d: development history (%q) in user documentation: %s", doc, l.n, m, strings.TrimSpace(l.text))
			}
		}
	}
}
