package chaos

import (
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/anishathalye/porcupine"
)

// Linearizability model: a register holding (n, lastOp).
//
//	read            → (n, lastOp)          state unchanged
//	increment(id)   → (n, lastOp) it read  state must equal what it read; becomes (n+1, id)
//
// An increment is one atomic read-modify-write in the model: under a correct lock
// nobody writes between its read and its write, so it can be linearized at its write.
// Its interval is [invocation of the write, response of the write].
//
// Unknown outcomes follow porcupine's convention for timed-out operations (an open
// interval, return = +∞, and the operation may or may not take effect), resolved before
// checking, which keeps the search small without changing the verdict:
//
//   - An unknown increment U whose id some effective operation R read (R's ObsLast = U)
//     took effect in every linearization: state (·, U) can only be written by U. Its
//     effect came before R read it, so its return is bounded by R's return.
//   - An unknown increment nobody read took effect in no valid linearization (its state
//     would have to be read by the next increment or by the final read, which names it),
//     so it is dropped, as a "did not happen" outcome.
//
// Increments reported as definitely not applied (refused by a condition, a lost lease,
// throttled) are dropped, as their API promises; if someone read their id anyway, the
// library misreported an outcome, which is counted (Misreported) and also makes the
// history non-linearizable.
type regState struct {
	N    int64
	Last string
}

type regInput struct {
	Kind opKind
	ID   string
}

type regOutput struct {
	N    int64
	Last string
}

var registerModel = porcupine.Model{
	Init: func() any { return regState{} },
	Step: func(state, input, output any) (bool, any) {
		s := state.(regState)
		in := input.(regInput)
		out := output.(regOutput)
		if s.N != out.N || s.Last != out.Last {
			return false, s
		}
		if in.Kind == opIncr {
			return true, regState{N: out.N + 1, Last: in.ID}
		}
		return true, s
	},
	Equal: func(a, b any) bool { return a.(regState) == b.(regState) },
	DescribeOperation: func(input, output any) string {
		in := input.(regInput)
		out := output.(regOutput)
		if in.Kind == opIncr {
			return fmt.Sprintf("incr %s: read (%d, %s)", in.ID, out.N, out.Last)
		}
		return fmt.Sprintf("read → (%d, %s)", out.N, out.Last)
	},
	DescribeState: func(state any) string {
		s := state.(regState)
		return fmt.Sprintf("(%d, %s)", s.N, s.Last)
	},
}

// partResult is the verdict on one partition (one counter item).
type partResult struct {
	Part, Strategy string

	Increments     int // invoked
	IncrOK         int
	IncrUnknown    int
	UnknownApplied int // unknown increments seen by others: they took effect
	IncrFailed     int
	Reads          int

	Applied             int // increments that took effect
	Final               int64
	LostUpdates         int // took effect but are missing from the final value
	DuplicateIncrements int // the final value counts more increments than took effect
	Misreported         int // reported as not applied, but seen applied
	Unexplained         int // values written by no operation of the history
	RefusedWhileValid   int // writes refused while the writer's lease was valid (not misreports)

	Result porcupine.CheckResult
	info   porcupine.LinearizationInfo

	Details []string // the first misreported and unexplained operations
}

// checkPartition resolves unknown outcomes and checks one partition's history; final is
// the partition's value as read after the run.
func checkPartition(ops []op, timeout time.Duration) partResult {
	r := partResult{}
	if len(ops) > 0 {
		r.Part, r.Strategy = ops[0].Part, ops[0].Strategy
	}
	byID := map[string]int{}
	for i := range ops {
		o := &ops[i]
		if o.Kind == opIncr {
			byID[o.ID] = i
		}
	}
	ret := make([]int64, len(ops))
	applied := make([]bool, len(ops))
	misreported := make([]bool, len(ops))
	var queue []int
	var finalIdx = -1
	for i := range ops {
		o := &ops[i]
		ret[i] = o.Return
		switch {
		case o.Kind == opRead:
			r.Reads++
			queue = append(queue, i)
			if o.Note == noteFinal {
				finalIdx = i
			}
		case o.Status == stOK:
			applied[i] = true
			queue = append(queue, i)
		}
	}
	unexplained := map[string]bool{}
	for len(queue) > 0 {
		i := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		last := ops[i].ObsLast
		if last == "" {
			continue
		}
		j, ok := byID[last]
		if !ok {
			unexplained[last] = true
			continue
		}
		p := &ops[j]
		switch p.Status {
		case stOK:
			// Its effect is known; nothing to resolve.
		case stUnknown, stFailed:
			if !applied[j] || ret[i] < ret[j] {
				applied[j] = true
				misreported[j] = p.Status == stFailed
				ret[j] = min(ret[j], ret[i])
				queue = append(queue, j)
			}
		}
	}
	r.Unexplained = len(unexplained)

	var hist []porcupine.Operation
	for i := range ops {
		o := &ops[i]
		switch o.Kind {
		case opRead:
			hist = append(hist, porcupine.Operation{
				ClientId: o.Client, Input: regInput{Kind: opRead}, Output: regOutput{N: o.ObsN, Last: o.ObsLast},
				Call: o.Call, Return: o.Return,
			})
			continue
		}
		r.Increments++
		switch o.Status {
		case stOK:
			r.IncrOK++
		case stUnknown:
			r.IncrUnknown++
			if applied[i] {
				r.UnknownApplied++
			}
		case stFailed:
			r.IncrFailed++
			if misreported[i] {
				r.Misreported++
				if len(r.Details) < 5 {
					r.Details = append(r.Details, fmt.Sprintf("%s: %s reported not applied (%s) but was read by later operations", r.Part, o.ID, o.Note))
				}
			} else if o.RefusedWhileValid {
				r.RefusedWhileValid++
			}
		}
		if applied[i] {
			r.Applied++
		}
		if !applied[i] || misreported[i] {
			continue // did not happen (or, per its API, must not have)
		}
		rt := ret[i]
		if rt == math.MaxInt64 || rt < o.Call {
			rt = max(o.Call, rt)
		}
		hist = append(hist, porcupine.Operation{
			ClientId: o.Client, Input: regInput{Kind: opIncr, ID: o.ID}, Output: regOutput{N: o.ObsN, Last: o.ObsLast},
			Call: o.Call, Return: rt,
		})
	}
	if finalIdx >= 0 {
		r.Final = ops[finalIdx].ObsN
		if d := ops[finalIdx].ObsAdds - r.Final; d > 0 {
			// Each locking-read write sets n = N+1 and ADDs 1 to adds: more adds than
			// n means a write was applied twice.
			r.DuplicateIncrements += int(d)
			if len(r.Details) < 5 {
				r.Details = append(r.Details, fmt.Sprintf("%s: %d writes applied twice (adds %d, n %d)", r.Part, d, ops[finalIdx].ObsAdds, r.Final))
			}
		}
	}
	if d := int64(r.Applied) - r.Final; d > 0 {
		r.LostUpdates = int(d)
	} else {
		r.DuplicateIncrements += int(-d)
	}
	sort.SliceStable(hist, func(a, b int) bool { return hist[a].Call < hist[b].Call })
	r.Result, r.info = porcupine.CheckOperationsVerbose(registerModel, hist, timeout)
	return r
}

const noteFinal = "final"

// partitions groups a history by partition, in a stable order.
func partitions(ops []op) (names []string, parts map[string][]op) {
	parts = map[string][]op{}
	for _, o := range ops {
		if _, ok := parts[o.Part]; !ok {
			names = append(names, o.Part)
		}
		parts[o.Part] = append(parts[o.Part], o)
	}
	sort.Strings(names)
	return names, parts
}
