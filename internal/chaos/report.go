package chaos

import (
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/anishathalye/porcupine"
)

// Report is chaos-report.json.
type Report struct {
	Seed      uint64  `json:"seed"`
	DurationS float64 `json:"duration_s"`
	// Operations is every operation of the checked history: increments invoked (whatever
	// their outcome) and reads.
	Operations int `json:"operations"`
	// Increments is the read-modify-write increments among them, IncrementsOK those
	// acknowledged.
	Increments   int `json:"increments"`
	IncrementsOK int `json:"increments_ok"`

	FaultsInjected      map[string]int64 `json:"faults_injected"`
	FaultsInjectedTotal int64            `json:"faults_injected_total"`
	Requests            int64            `json:"requests"` // requests that reached the proxy's HTTP layer

	// Crashes: holder processes killed with SIGKILL while holding (handler crashes, which
	// are in-process, are counted under handlers). Pauses: holder processes frozen with
	// SIGSTOP past their lease, plus optimistic writers paused in their merge.
	// SkewedClients: workers, holder processes and handlers whose clock was off.
	Crashes       int `json:"crashes"`
	Pauses        int `json:"pauses"`
	SkewedClients int `json:"skewed_clients"`
	// Bursts: times a strategy's workers were gathered, its locks left idle, and all let
	// go together on the same keys (see idle.go).
	Bursts int `json:"bursts"`

	Linearizable              bool `json:"linearizable"`
	MutualExclusionViolations int  `json:"mutual_exclusion_violations"`
	FenceRegressions          int  `json:"fence_regressions"`
	LostUpdates               int  `json:"lost_updates"`
	// DuplicateIncrements: the counters hold more increments than took effect (an
	// operation applied twice).
	DuplicateIncrements int `json:"duplicate_increments"`
	// MisreportedOutcomes: writes reported as not applied that took effect.
	MisreportedOutcomes int `json:"misreported_outcomes"`
	// OrphanTickets: ticket-lock entries left in the queue after the run by waiters that
	// are gone (a ticket request that landed after its waiter gave up), beyond those of
	// holder processes killed before they acquired. Each would idle the lock a lease.
	OrphanTickets int `json:"orphan_tickets"`
	// MessagesLost and MessagesDoubleApplied are null when the handler workload did not
	// run (see Notes).
	MessagesLost          *int `json:"messages_lost"`
	MessagesDoubleApplied *int `json:"messages_double_applied"`

	OK bool `json:"ok"`

	Config     ReportConfig               `json:"config"`
	Strategies map[string]*StrategyReport `json:"strategies"`
	Findings   []string                   `json:"findings,omitempty"` // the first problems, in words
	Events     map[string]int             `json:"events,omitempty"`   // acquire failures, refused writes... by strategy
	Notes      []string                   `json:"notes,omitempty"`
	Shop       *ShopResult                `json:"handlers,omitempty"`
	Keys       map[string]*KeyReport      `json:"keys,omitempty"`
	Pause      map[string]map[string]int  `json:"pause_outcomes,omitempty"`
}

// ReportConfig echoes the run's configuration.
type ReportConfig struct {
	Workers      int      `json:"workers_per_strategy"`
	Strategies   []string `json:"strategies"`
	Lease        string   `json:"lease"`
	Keys         int      `json:"keys_per_strategy"`
	Faults       string   `json:"faults"`
	Disrupt      bool     `json:"crashes_and_pauses"`
	DisruptEvery string   `json:"disrupt_every"`
	Skew         bool     `json:"skewed_clocks"`
	Think        string   `json:"think"`
	BurstEvery   string   `json:"burst_every"`
	Hold         string   `json:"hold"`
}

// StrategyReport sums the keys of one strategy.
type StrategyReport struct {
	Operations                int    `json:"operations"`
	Increments                int    `json:"increments"`
	IncrementsOK              int    `json:"increments_ok"`
	IncrementsUnknown         int    `json:"increments_unknown"`
	UnknownApplied            int    `json:"unknown_applied"`
	IncrementsFailed          int    `json:"increments_failed"`
	Reads                     int    `json:"reads"`
	Linearizable              bool   `json:"linearizable"`
	Crashes                   int    `json:"crashes"`
	Pauses                    int    `json:"pauses"`
	LostUpdates               int    `json:"lost_updates"`
	DuplicateIncrements       int    `json:"duplicate_increments"`
	MisreportedOutcomes       int    `json:"misreported_outcomes"`
	Unexplained               int    `json:"unexplained_values"`
	MutualExclusionViolations int    `json:"mutual_exclusion_violations_at_data"`
	Check                     string `json:"check"`
}

// KeyReport is one counter item.
type KeyReport struct {
	Final         int64  `json:"final"`
	Applied       int    `json:"applied"`
	Check         string `json:"check"`
	Visualization string `json:"visualization,omitempty"`
}

func (r *runner) report(elapsed time.Duration, shopRes *ShopResult) *Report {
	rep := &Report{
		Seed: r.cfg.Seed, DurationS: elapsed.Seconds(),
		FaultsInjected: r.proxy.Counts(), Requests: r.proxy.Requests(),
		Linearizable: true,
		Strategies:   map[string]*StrategyReport{},
		Keys:         map[string]*KeyReport{},
		Config: ReportConfig{
			Workers: r.cfg.Workers, Strategies: r.cfg.Strategies, Lease: r.cfg.Lease.String(), Keys: r.cfg.Keys,
			Faults: r.cfg.Faults.String(), Disrupt: r.cfg.Disrupt, DisruptEvery: r.cfg.DisruptEvery.String(), Skew: r.cfg.Skew,
			Think: r.cfg.Think.String(), BurstEvery: r.cfg.BurstEvery.String(), Hold: r.cfg.Hold.String(),
		},
		Bursts: int(r.bursts.Load()),
	}
	for _, n := range rep.FaultsInjected {
		rep.FaultsInjectedTotal += n
	}
	for _, st := range r.cfg.Strategies {
		rep.Strategies[st] = &StrategyReport{Linearizable: true, Check: string(porcupine.Ok)}
	}
	finding := func(format string, args ...any) {
		if len(rep.Findings) < 50 {
			rep.Findings = append(rep.Findings, fmt.Sprintf(format, args...))
		}
	}
	names, parts := partitions(r.hist.snapshot())
	for _, name := range names {
		res := checkPartition(parts[name], r.cfg.CheckTimeout)
		sr := rep.Strategies[res.Strategy]
		n := res.Increments + res.Reads
		rep.Operations += n
		rep.Increments += res.Increments
		rep.IncrementsOK += res.IncrOK
		sr.Operations += n
		sr.Increments += res.Increments
		sr.IncrementsOK += res.IncrOK
		sr.IncrementsUnknown += res.IncrUnknown
		sr.UnknownApplied += res.UnknownApplied
		sr.IncrementsFailed += res.IncrFailed
		sr.Reads += res.Reads
		sr.LostUpdates += res.LostUpdates
		sr.DuplicateIncrements += res.DuplicateIncrements
		sr.MisreportedOutcomes += res.Misreported
		sr.Unexplained += res.Unexplained
		sr.MutualExclusionViolations += res.RefusedWhileValid
		rep.LostUpdates += res.LostUpdates
		rep.DuplicateIncrements += res.DuplicateIncrements
		rep.MisreportedOutcomes += res.Misreported
		rep.MutualExclusionViolations += res.RefusedWhileValid
		kr := &KeyReport{Final: res.Final, Applied: res.Applied, Check: string(res.Result)}
		rep.Keys[name] = kr
		if res.Result != porcupine.Ok {
			rep.Linearizable = false
			sr.Linearizable = false
			sr.Check = string(res.Result)
			kr.Visualization = r.visualize(res)
			finding("%s: linearizability check: %s", name, res.Result)
		}
		if res.LostUpdates > 0 {
			finding("%s: %d increments took effect but the counter holds %d (lost updates: %d)", name, res.Applied, res.Final, res.LostUpdates)
		}
		if res.DuplicateIncrements > 0 {
			finding("%s: the counter holds %d but only %d increments took effect", name, res.Final, res.Applied)
		}
		if res.Misreported > 0 {
			finding("%s: %d writes reported as not applied took effect", name, res.Misreported)
			for _, d := range res.Details {
				finding("%s", d)
			}
		}
		if res.Unexplained > 0 {
			finding("%s: %d values written by no operation of the history", name, res.Unexplained)
		}
		if res.RefusedWhileValid > 0 {
			finding("%s: %d writes refused while the writer's lease was still valid", name, res.RefusedWhileValid)
		}
	}
	violations, regressions := r.mon.results()
	rep.MutualExclusionViolations += len(violations)
	rep.FenceRegressions += len(regressions)
	for _, v := range violations {
		finding("mutual exclusion: %s", v)
	}
	for _, v := range regressions {
		finding("fence: %s", v)
	}

	s := r.stats
	s.mu.Lock()
	for st, n := range s.crashes {
		rep.Crashes += n
		if sr := rep.Strategies[st]; sr != nil {
			sr.Crashes = n
		}
	}
	for st, n := range s.pauses {
		rep.Pauses += n
		if sr := rep.Strategies[st]; sr != nil {
			sr.Pauses = n
		}
	}
	rep.Pause = map[string]map[string]int{}
	for st := range s.pauses {
		rep.Pause[st] = map[string]int{"write_refused": s.pauseRefused[st], "write_accepted_no_takeover": s.pauseWrote[st]}
	}
	rep.SkewedClients = s.skewed
	rep.Events = map[string]int{}
	for k, v := range s.events {
		rep.Events[k] = v
	}
	rep.Notes = append(rep.Notes, s.notes...)
	s.mu.Unlock()

	if shopRes != nil {
		rep.Shop = shopRes
		rep.MessagesLost = &shopRes.Lost
		rep.MessagesDoubleApplied = &shopRes.DoubleApplied
		rep.Operations += shopRes.Deliveries
		rep.SkewedClients += shopRes.SkewedHandlers
		for _, f := range shopRes.Findings {
			finding("handlers: %s", f)
		}
	} else {
		rep.Notes = append(rep.Notes,
			"messages_lost and messages_double_applied are null: the order/inventory handler workload (internal/shop) was not part of this run.")
	}
	rep.OK = (shopRes == nil || shopRes.NegativeStock == 0) && rep.Linearizable && rep.MutualExclusionViolations == 0 && rep.FenceRegressions == 0 &&
		rep.LostUpdates == 0 && rep.DuplicateIncrements == 0 && rep.MisreportedOutcomes == 0 && rep.OrphanTickets == 0 &&
		(rep.MessagesLost == nil || *rep.MessagesLost == 0) &&
		(rep.MessagesDoubleApplied == nil || *rep.MessagesDoubleApplied == 0)
	return rep
}

// WriteFile writes the report as indented JSON.
func (rep *Report) WriteFile(path string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
