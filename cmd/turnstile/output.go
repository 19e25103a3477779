package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/turnstile-locks/turnstile/lockcore"
)

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func sortLocks(locks []lockcore.Lock) {
	slices.SortFunc(locks, func(a, b lockcore.Lock) int {
		return strings.Compare(a.Key+"\x00"+a.Namespace+"\x00"+string(a.Strategy), b.Key+"\x00"+b.Namespace+"\x00"+string(b.Strategy))
	})
}

const timeLayout = "2006-01-02T15:04:05.000Z07:00"

// ago formats t relative to now: "3.2s ago", "in 1m5s".
func ago(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	if d >= 0 {
		return short(d) + " ago"
	}
	return "in " + short(-d)
}

func short(d time.Duration) string {
	switch {
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

func stamp(t, now time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(timeLayout) + " (" + ago(t, now) + ")"
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// fence formats a token as lockcore.Fence.String does ("4294967297 (epoch 1, seq 1)"),
// "-" for none.
func fence(f lockcore.Fence) string {
	if f == 0 {
		return "-"
	}
	return f.String()
}

// leaseLabel names a holder's lease: its lease id, or for a holder shown as "ticket N"
// (no owner recorded) also the lease id's part after the owner, which the holder's
// process logs: "ticket 2 (<owner>#yA3b_9Qz)".
func leaseLabel(leaseID, suffix string) string {
	if suffix == "" {
		return leaseID
	}
	return leaseID + " (<owner>#" + suffix + ")"
}

// writeLockTable prints one line per lock.
func writeLockTable(w io.Writer, locks []lockcore.Lock, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tNAMESPACE\tSTRATEGY\tSTATE\tOWNER\tLEASE ID\tACQUIRED\tLEASE END\tFENCE\tREV\tWAITERS")
	for _, l := range locks {
		owner, lease, acq, until := "-", "-", "-", "-"
		if h := l.Holder; h != nil {
			owner, lease, acq, until = dash(h.Owner), dash(leaseLabel(h.LeaseID, h.LeaseSuffix)), ago(h.AcquiredAt, now), ago(h.Until, now)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\n", l.Key, l.Namespace, l.Strategy, l.State,
			owner, lease, acq, until, fence(l.Fence.Token), l.Revision, len(l.Waiters))
	}
	_ = tw.Flush()
}

// watchNote adds a line to a lock's details in watch mode.
type watchNote func(l lockcore.Lock) string

// writeLocks prints each lock's details.
func writeLocks(w io.Writer, locks []lockcore.Lock, now time.Time, note watchNote) {
	for i, l := range locks {
		if i > 0 {
			fmt.Fprintln(w)
		}
		writeLock(w, l, now, note)
	}
}

func writeLock(w io.Writer, l lockcore.Lock, now time.Time, note watchNote) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, args...)...) }
	row("key", "%s", l.Key)
	row("namespace", "%s", l.Namespace)
	row("strategy", "%s", l.Strategy)
	state := string(l.State)
	if l.State == lockcore.LockAbandoned {
		state += " (the holder's lease end + skew allowance has passed; nobody took it over yet)"
	}
	row("state", "%s", state)
	if h := l.Holder; h != nil {
		if h.Owner != "" {
			row("owner", "%s", h.Owner)
		}
		if h.LeaseSuffix != "" {
			row("lease id", "%s, lease id <owner>#%s (the lock row records no owner name: match the part after \"#\" in the holder's logs)", h.LeaseID, h.LeaseSuffix)
		} else {
			row("lease id", "%s", h.LeaseID)
		}
		if !h.AcquiredAt.IsZero() {
			row("acquired", "%s", stamp(h.AcquiredAt, now))
		}
		if !h.Heartbeat.IsZero() {
			row("heartbeat", "%s", stamp(h.Heartbeat, now))
		}
		lease := ""
		if h.Lease > 0 {
			lease = "lease " + h.Lease.String()
		}
		if !h.Until.IsZero() {
			row("lease end", "%s%s", stamp(h.Until, now), strings.TrimSuffix("; "+lease, "; "))
		} else if lease != "" {
			row("lease", "%s (no wall-clock lease end recorded: a ticket lock records none, a mutex holder handed the lock by a force-release, at its first heartbeat)", h.Lease)
		}
	} else {
		row("holder", "none")
	}
	fenceLabel := "fence"
	if l.Holder == nil {
		fenceLabel = "last fence"
	}
	row(fenceLabel, "%s", fence(l.Fence.Token))
	row("revision", "%d", l.Revision)
	if t := l.Tickets; t != nil {
		if l.Strategy == lockcore.StrategyTicket {
			row("tickets", "serving %d, last issued %d, last released %d, last skipped %d", t.Serving, t.Next, t.Released, t.Skipped)
		} else {
			row("tickets", "last issued %d", t.Next)
		}
	}
	if len(l.Data) > 0 {
		row("data", "%d bytes: %s", len(l.Data), printable(l.Data))
	}
	if !l.Expires.IsZero() {
		row("row ttl", "%s", stamp(l.Expires, now))
	}
	if note != nil {
		if s := note(l); s != "" {
			row("unchanged", "%s", s)
		}
	}
	if l.Strategy != lockcore.StrategyMutex {
		if len(l.Waiters) == 0 {
			row("waiters", "none")
		} else {
			row("waiters", "%d, in the order they enter", len(l.Waiters))
		}
	}
	if f := l.LastForced; f != nil {
		row("last forced", "%s by %s: %q", stamp(f.At, now), f.Actor, f.Reason)
		row("", "ended lease %s%s, token %s", f.LeaseID, ownerSuffix(f.Owner), f.Token)
	}
	_ = tw.Flush()
	if len(l.Waiters) > 0 {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		if l.Strategy == lockcore.StrategyTicket {
			fmt.Fprintln(tw, "  POS\tTICKET\tLEASE (ticket entries carry no owner names)")
			for _, wt := range l.Waiters {
				fmt.Fprintf(tw, "  %d\t%d\t%s\n", wt.Position, wt.Ticket, leaseLabel(wt.LeaseID, wt.LeaseSuffix))
			}
		} else {
			fmt.Fprintln(tw, "  POS\tTICKET\tOWNER\tLEASE ID\tHEARTBEAT\tLEASE END\tREV\tSTATE")
			for _, wt := range l.Waiters {
				st := "waiting"
				if wt.Abandoned {
					st = "abandoned"
				}
				fmt.Fprintf(tw, "  %d\t%d\t%s\t%s\t%s\t%s\t%d\t%s\n", wt.Position, wt.Ticket, dash(wt.Owner), leaseLabel(wt.LeaseID, wt.LeaseSuffix),
					ago(wt.Heartbeat, now), ago(wt.Until, now), wt.Revision, st)
			}
		}
		_ = tw.Flush()
	}
	if len(l.Audit) > 0 {
		fmt.Fprintln(w, "audit (force-releases, oldest first):")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  AT\tACTOR\tENDED LEASE\tOWNER\tTOKEN\tREASON")
		for _, a := range l.Audit {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%q\n", a.At.UTC().Format(timeLayout), a.Actor, a.LeaseID, dash(a.Owner), fence(a.Token.Token), a.Reason)
		}
		_ = tw.Flush()
	}
}

func ownerSuffix(owner string) string {
	if owner == "" {
		return ""
	}
	return " of " + owner
}

func printable(b []byte) string {
	s := string(b)
	if len(s) > 64 {
		s = s[:64] + "..."
	}
	return strconv.Quote(s)
}

func writeItemLock(w io.Writer, il *lockcore.ItemLock, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, format string, args ...any) { fmt.Fprintf(tw, "%s\t"+format+"\n", append([]any{k}, args...)...) }
	var key []string
	for _, k := range keys(il.Key) {
		key = append(key, k+"="+il.Key[k])
	}
	row("item", "%s in %s", strings.Join(key, ","), il.Table)
	row("strategy", "item (locking read)")
	if !il.Exists {
		row("state", "no such item")
		_ = tw.Flush()
		return
	}
	row("state", "%s", il.State)
	if h := il.Holder; h != nil {
		row("owner", "%s", h.Owner)
		row("lease id", "%s", h.LeaseID)
		row("locked", "%s (last acquisition or renewal)", stamp(h.AcquiredAt, now))
		row("lease end", "%s; lease %s", stamp(h.Until, now), h.Lease)
	}
	row("fence", "%s (epoch: when this life of the item began, µs; seq: its ticket)", il.Fence)
	row("revision", "%d", il.Revision)
	if t := il.Tickets; t != nil {
		row("tickets", "serving %d, last issued %d", t.Serving, t.Next)
		if len(il.Waiters) == 0 {
			row("waiters", "none")
		} else {
			row("waiters", "%d, in the order they enter", len(il.Waiters))
		}
	}
	_ = tw.Flush()
	if len(il.Waiters) > 0 {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  POS\tTICKET\tENTRY")
		for _, wt := range il.Waiters {
			fmt.Fprintf(tw, "  %d\t%d\t%s (ticket entries carry no owner names)\n", wt.Position, wt.Ticket, wt.LeaseID)
		}
		_ = tw.Flush()
	}
}

func writeForceRecord(w io.Writer, r *lockcore.ForceRecord) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "released\t%s %q (namespace %s)\n", r.Strategy, r.Key, r.Namespace)
	fmt.Fprintf(tw, "ended lease\t%s%s\n", r.LeaseID, ownerSuffix(r.Owner))
	fmt.Fprintf(tw, "token\t%s\n", r.Token)
	fmt.Fprintf(tw, "by\t%s\n", r.Actor)
	fmt.Fprintf(tw, "at\t%s\n", r.At.UTC().Format(timeLayout))
	fmt.Fprintf(tw, "reason\t%q\n", r.Reason)
	fmt.Fprintf(tw, "audit id\t%s\n", r.ID)
	_ = tw.Flush()
	fmt.Fprintln(w, "The old holder's renewals and guarded writes now fail with ErrLeaseLost; `locks show` displays this record.")
}

// watch shows the key every interval until ctx ends (or count refreshes were shown;
// then it returns the last refresh's error, unless the lock merely does not exist yet).
// For each lock it tracks how long its holder and revision have stayed unchanged on this
// machine's clock: what lockcore's waiters measure before they take over.
func watch(ctx context.Context, c *cli, in *lockcore.Inspector, opts lockcore.ShowOptions, interval time.Duration, count int) error {
	type version struct {
		lease string
		rev   int64
		since time.Time
	}
	seen := map[string]version{}
	note := func(l lockcore.Lock) string {
		if l.Holder == nil {
			return ""
		}
		id := l.Namespace + "\x00" + string(l.Strategy)
		v, now := seen[id], time.Now()
		if v.lease != l.Holder.LeaseID || v.rev != l.Revision {
			v = version{lease: l.Holder.LeaseID, rev: l.Revision, since: now}
			seen[id] = v
			return ""
		}
		s := short(now.Sub(v.since)) + " (holder and revision, on this machine's clock)"
		if l.Holder.Lease > 0 && now.Sub(v.since) >= l.Holder.Lease {
			s += ": longer than the lease, waiters may take over"
		}
		return s
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for i := 1; ; i++ {
		locks, err := in.Show(ctx, c.key(), opts)
		if ctx.Err() != nil {
			return nil // Ctrl-C
		}
		now := time.Now()
		if c.output == "json" {
			frame := struct {
				At    time.Time       `json:"at"`
				Locks []lockcore.Lock `json:"locks"`
				Error string          `json:"error,omitempty"`
			}{At: now, Locks: locks}
			if err != nil {
				frame.Error = c.explain(ctx, err).Error()
			}
			b, _ := json.Marshal(frame)
			fmt.Fprintf(c.stdout, "%s\n", b)
		} else {
			if c.env.terminal {
				fmt.Fprint(c.stdout, "\x1b[H\x1b[2J") // home, clear screen
			}
			fmt.Fprintf(c.stdout, "every %s: %s %s (Ctrl-C to stop)   %s\n\n", interval, c.name, c.key(), now.UTC().Format(timeLayout))
			switch {
			case errors.Is(err, lockcore.ErrLockNotFound):
				fmt.Fprintf(c.stdout, "no lock rows for %q yet\n", c.key())
			case err != nil:
				fmt.Fprintf(c.stdout, "error: %v\n", c.explain(ctx, err))
			default:
				writeLocks(c.stdout, locks, now, note)
			}
			if !c.env.terminal {
				fmt.Fprintln(c.stdout)
			}
		}
		if err != nil && (errors.Is(err, lockcore.ErrInvalidKey) || errors.Is(err, lockcore.ErrInvalidOption)) {
			return err
		}
		if count > 0 && i >= count {
			if err != nil && !errors.Is(err, lockcore.ErrLockNotFound) {
				return err // the last refresh failed: the caller must not read success
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
