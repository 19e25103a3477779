package faultproxy

import (
	"github.com/Shopify/toxiproxy/v2/toxics"
)

// resetToxicType is the toxiproxy type name of resetToxic.
const resetToxicType = "turnstile_reset"

// resetToxic ends the connection at a chunk of data, dropping it, with the probability
// its injector gives for its kind. On the upstream stream the dropped chunk is (part of)
// a request, which so never reaches the engine; on the downstream stream it is (part
// of) a response to a request the engine already executed.
//
// toxiproxy creates one value per toxic from its JSON attributes; the injector is found
// by id because toxiproxy offers no other way to hand a toxic shared state.
type resetToxic struct {
	Injector string `json:"injector"`
	Kind     string `json:"kind"`
}

func (t *resetToxic) Pipe(stub *toxics.ToxicStub) {
	inj := lookup(t.Injector)
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				stub.Close()
				return
			}
			if inj != nil && inj.decide(t.Kind) {
				stub.Close() // drop c and end the link: the connection is closed
				drain(stub)
				return
			}
			stub.Output <- c
		}
	}
}

func init() {
	toxics.Register(resetToxicType, new(resetToxic))
}

// drain discards the rest of the stream until it ends, so that the toxics before this
// one (and toxiproxy's reader) are not left blocked on a link nobody reads any more.
func drain(stub *toxics.ToxicStub) {
	for {
		select {
		case <-stub.Interrupt:
			return
		case c := <-stub.Input:
			if c == nil {
				return
			}
		}
	}
}
