package chaos

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/turnstile-locks/turnstile/internal/ddblocal"
)

// Holder processes. A crashed or paused holder must be a separate OS process: only then
// does SIGKILL stop everything at once (heartbeats included) and SIGSTOP freeze it
// whole, like a Lambda execution environment that is killed or frozen. A chaos run
// re-executes its own binary (cmd/chaos, or the test binary) with EnvHolder set; the
// child acquires, reads, reports "held" on stdout and then waits for the parent's
// "write" command on stdin, unless it is killed first.

// EnvHolder carries a holder process's spec (JSON); its presence selects the role.
const EnvHolder = "TURNSTILE_CHAOS_HOLDER"

// holderSpec is what a holder process is told to do.
type holderSpec struct {
	Session  sessionSpec `json:"session"`
	Endpoint string      `json:"endpoint"`
	Keys     []int       `json:"keys"`
	Seed     uint64      `json:"seed"`
}

// holderEvent is a line a holder process prints.
type holderEvent struct {
	Ev string `json:"ev"` // held, wrote, problem, error

	// held
	Tokens  []int64  `json:"tokens,omitempty"`
	Leases  []string `json:"leases,omitempty"`
	Obs     []obs    `json:"obs,omitempty"`
	Started int64    `json:"started,omitempty"` // unix ns before the acquire call (real clock)

	// wrote
	Status            string `json:"status,omitempty"`
	RefusedWhileValid bool   `json:"refused_while_valid,omitempty"`

	// problem
	Kind string `json:"kind,omitempty"`

	Msg string `json:"msg,omitempty"`
}

// IsHolder reports whether this process was started as a holder by a chaos run. Call
// HolderMain then, before anything else (flag parsing, TestMain's engine).
func IsHolder() bool { return os.Getenv(EnvHolder) != "" }

// HolderMain runs the holder role and exits the process.
func HolderMain() {
	if err := holderMain(os.Stdin, os.Stdout); err != nil {
		_ = json.NewEncoder(os.Stdout).Encode(holderEvent{Ev: "error", Msg: err.Error()})
		os.Exit(1)
	}
	os.Exit(0)
}

func holderMain(stdin io.Reader, stdout io.Writer) error {
	var spec holderSpec
	if err := json.Unmarshal([]byte(os.Getenv(EnvHolder)), &spec); err != nil {
		return fmt.Errorf("holder: spec: %w", err)
	}
	var mu sync.Mutex
	enc := json.NewEncoder(stdout)
	emit := func(ev holderEvent) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(ev)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	db, err := ddblocal.NewClient(ctx, spec.Endpoint)
	if err != nil {
		return err
	}
	s, err := newSession(db, spec.Session, spec.Seed)
	if err != nil {
		return err
	}
	h, err := s.acquire(ctx, spec.Keys, func(kind, msg string) { emit(holderEvent{Ev: "problem", Kind: kind, Msg: msg}) })
	if err != nil {
		return fmt.Errorf("holder: acquire: %w", err)
	}
	ev := holderEvent{Ev: "held", Started: h.started.UnixNano(), Obs: h.obs}
	for i, l := range h.leases {
		ev.Tokens = append(ev.Tokens, int64(h.tokens[i]))
		ev.Leases = append(ev.Leases, l.ID())
	}
	emit(ev)

	sc := bufio.NewScanner(stdin)
	for sc.Scan() {
		cmd, arg, _ := strings.Cut(sc.Text(), " ")
		if cmd != "write" {
			continue
		}
		ids := strings.Split(arg, ",")
		if len(ids) != len(h.keys) {
			return fmt.Errorf("holder: write: %d ids for %d keys", len(ids), len(h.keys))
		}
		sts, rwv, err := s.write(ctx, h, ids)
		msg := ""
		if err != nil {
			msg = err.Error()
		}
		emit(holderEvent{Ev: "wrote", Status: sts[0].String(), RefusedWhileValid: rwv, Msg: msg})
		_ = s.release(ctx, h, false)
		return nil
	}
	return nil // parent closed stdin: leave without releasing, like a crash
}

// holderProc is a running holder process, seen from the parent.
type holderProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	events chan holderEvent
	done   chan struct{}
	stderr *syncWriter
}

// startHolder starts a holder process.
func startHolder(command func() (*exec.Cmd, error), spec holderSpec) (*holderProc, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, err
	}
	cmd, err := command()
	if err != nil {
		return nil, err
	}
	cmd.Env = append(os.Environ(), EnvHolder+"="+string(b))
	setDeathSignal(cmd)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	p := &holderProc{cmd: cmd, stdin: stdin, events: make(chan holderEvent, 16), done: make(chan struct{}), stderr: &syncWriter{}}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start holder process: %w", err)
	}
	go func() {
		defer close(p.events)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			var ev holderEvent
			if json.Unmarshal(sc.Bytes(), &ev) == nil {
				p.events <- ev
			}
		}
	}()
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// next waits for the next event of type ev (other events go to other), until d passes.
func (p *holderProc) next(ctx context.Context, ev string, d time.Duration, other func(holderEvent)) (holderEvent, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		select {
		case e, ok := <-p.events:
			if !ok {
				<-p.done
				return holderEvent{}, fmt.Errorf("holder exited (%v) before %q: %s", p.cmd.ProcessState, ev, p.stderrTail())
			}
			if e.Ev == ev {
				return e, nil
			}
			if e.Ev == "error" {
				return holderEvent{}, errors.New(e.Msg)
			}
			if other != nil {
				other(e)
			}
		case <-t.C:
			return holderEvent{}, fmt.Errorf("holder: no %q within %s", ev, d)
		case <-ctx.Done():
			return holderEvent{}, ctx.Err()
		}
	}
}

func (p *holderProc) send(line string) error {
	_, err := io.WriteString(p.stdin, line+"\n")
	return err
}

// kill ends the process with SIGKILL and reaps it.
func (p *holderProc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

// wait waits up to d for the process to exit by itself, then kills it.
func (p *holderProc) wait(d time.Duration) {
	select {
	case <-p.done:
	case <-time.After(d):
		p.kill()
	}
}

func (p *holderProc) stderrTail() string {
	p.stderr.mu.Lock()
	s := p.stderr.b.String()
	p.stderr.mu.Unlock()
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return s
}

// syncWriter collects a process's stderr.
type syncWriter struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 1<<20 {
		return len(b), nil
	}
	return s.b.Write(b)
}
