package faultproxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Stale reads model a lagging replica: an eventually consistent read may be answered
// with any state its item had during the last StaleFor, not only with the state someone
// happened to read then. For that the proxy keeps, per item, the shapes of the
// eventually consistent GetItem requests it has seen for it (the request body: table,
// key, projection) and, after every write that touches the item (PutItem, UpdateItem,
// DeleteItem, TransactWriteItems, BatchWriteItem), asks the engine each of those reads
// again and records the answer: the state the write left, as each shape shows it. A
// stale answer is one of those recorded within StaleFor of the read. Queries and Scans
// have no single item: they are answered with an earlier answer to the same request.
//
// The recorded time of a state is when its read was sent: the state held then or
// later, so a stale answer is never older than StaleFor. A replica lags in time, not in
// writes: the state the item had at the start of the window — the last one recorded
// before it, however long ago, if no write came since — is among the answers too. After
// an idle spell the first write's state is not the only one a read may get: a lagging
// replica still shows the state of before it (e.g. an idle lock row, right after an
// uncontended take).

// itemRef names an item by table and canonical key.
type itemRef struct{ table, key string }

// readShape is one eventually consistent read request and its recorded answers.
type readShape struct {
	target  string // X-Amz-Target
	header  http.Header
	body    []byte
	answers []answer
	// floor: answers sent before it are not kept (see forget).
	floor time.Time
}

// answer is an engine's answer to a read.
type answer struct {
	at     time.Time
	header http.Header
	body   []byte
}

// staleCache holds the read shapes by item, and the key attribute names by table
// (learned from the reads' keys; a PutItem names its item, not its key).
type staleCache struct {
	mu       sync.Mutex
	shapes   map[itemRef]map[string]*readShape // by canonical body
	keyNames map[string][]string
}

func newStaleCache() *staleCache {
	return &staleCache{shapes: map[itemRef]map[string]*readShape{}, keyNames: map[string][]string{}}
}

// capture marks a forwarded eventually consistent read whose answer is recorded.
type capture struct {
	shape *readShape
	sent  time.Time
}

// maxAnswers bounds the answers kept per read shape; maxCaptured the size of each.
const (
	maxAnswers  = 32
	maxCaptured = 64 << 10
)

// eventualRead returns the item and the canonical body of an eventually consistent
// GetItem, Query or Scan (ok false for any other request). Queries and Scans get an
// item of their own (table "", key = their body). Bodies are re-encoded with their
// object keys sorted: the SDK writes maps (a Key, expression values) in random order.
func eventualRead(target string, body []byte) (ref itemRef, canon string, keyNames []string, ok bool) {
	op := opOf(target)
	if op != "GetItem" && op != "Query" && op != "Scan" {
		return itemRef{}, "", nil, false
	}
	var in map[string]any
	if json.Unmarshal(body, &in) != nil {
		return itemRef{}, "", nil, false
	}
	if c, isBool := in["ConsistentRead"].(bool); isBool && c {
		return itemRef{}, "", nil, false
	}
	b, err := json.Marshal(in)
	if err != nil {
		return itemRef{}, "", nil, false
	}
	canon = op + "\x00" + string(b)
	if op != "GetItem" {
		return itemRef{key: canon}, canon, nil, true
	}
	table, _ := in["TableName"].(string)
	key, _ := in["Key"].(map[string]any)
	kb, err := json.Marshal(key)
	if table == "" || len(key) == 0 || err != nil {
		return itemRef{}, "", nil, false
	}
	for n := range key {
		keyNames = append(keyNames, n)
	}
	return itemRef{table: table, key: string(kb)}, canon, keyNames, true
}

func opOf(target string) string { return target[strings.LastIndexByte(target, '.')+1:] }

// shape returns the read shape of (ref, canon), adding it if new.
func (c *staleCache) shape(ref itemRef, canon string, keyNames []string, target string, h http.Header, body []byte) *readShape {
	c.mu.Lock()
	defer c.mu.Unlock()
	if ref.table != "" && len(c.keyNames[ref.table]) == 0 {
		c.keyNames[ref.table] = keyNames
	}
	byBody := c.shapes[ref]
	if byBody == nil {
		byBody = map[string]*readShape{}
		c.shapes[ref] = byBody
	}
	s := byBody[canon]
	if s == nil {
		s = &readShape{target: target, header: h.Clone(), body: body}
		byBody[canon] = s
	}
	return s
}

// record keeps an answer of s sent at, dropping answers superseded before the window
// (an answer older than window stays while it is the state at the window's start).
func (c *staleCache) record(s *readShape, at time.Time, h http.Header, body []byte, window time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at.Before(s.floor) {
		return
	}
	now := time.Now()
	as := s.answers
	for len(as) > 0 && ((len(as) > 1 && now.Sub(as[1].at) > window) || len(as) >= maxAnswers) {
		as = as[1:]
	}
	// Keep them in order of their time (refreshes run concurrently).
	i, _ := slices.BinarySearchFunc(as, at, func(a answer, t time.Time) int { return a.at.Compare(t) })
	s.answers = slices.Insert(slices.Clip(as), i, answer{at: at, header: h.Clone(), body: body})
}

// recent returns the answers of s that show a state the item had within window: those
// recorded within it and the last one recorded before it (the state at its start).
func (c *staleCache) recent(s *readShape, window time.Duration) []answer {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	var out []answer
	for i, a := range s.answers {
		if now.Sub(a.at) <= window || i == len(s.answers)-1 || now.Sub(s.answers[i+1].at) <= window {
			out = append(out, a)
		}
	}
	return out
}

// forget drops the answers of s sent before at, and any recorded later: the state a
// write left could not be recorded, so they show states that write superseded, and
// the last of them would be served as the state at the start of every later window.
func (c *staleCache) forget(s *readShape, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if at.After(s.floor) {
		s.floor = at
	}
	s.answers = slices.DeleteFunc(s.answers, func(a answer) bool { return a.at.Before(s.floor) })
}

// written returns the read shapes of the items a write request touches.
func (c *staleCache) written(target string, body []byte) []*readShape {
	var refs []itemRef
	type keyed struct {
		TableName string
		Key       map[string]any
		Item      map[string]any
	}
	add := func(k keyed) {
		if k.Key == nil && k.Item != nil {
			c.mu.Lock()
			names := c.keyNames[k.TableName]
			c.mu.Unlock()
			k.Key = map[string]any{}
			for _, n := range names {
				k.Key[n] = k.Item[n]
			}
		}
		if b, err := json.Marshal(k.Key); err == nil && k.TableName != "" {
			refs = append(refs, itemRef{table: k.TableName, key: string(b)})
		}
	}
	switch opOf(target) {
	case "PutItem", "UpdateItem", "DeleteItem":
		var k keyed
		if json.Unmarshal(body, &k) == nil {
			add(k)
		}
	case "TransactWriteItems":
		var in struct {
			TransactItems []struct{ Put, Update, Delete *keyed }
		}
		if json.Unmarshal(body, &in) == nil {
			for _, it := range in.TransactItems {
				for _, k := range []*keyed{it.Put, it.Update, it.Delete} {
					if k != nil {
						add(*k)
					}
				}
			}
		}
	case "BatchWriteItem":
		var in struct {
			RequestItems map[string][]struct {
				PutRequest    *struct{ Item map[string]any }
				DeleteRequest *struct{ Key map[string]any }
			}
		}
		if json.Unmarshal(body, &in) == nil {
			for table, reqs := range in.RequestItems {
				for _, r := range reqs {
					switch {
					case r.PutRequest != nil:
						add(keyed{TableName: table, Item: r.PutRequest.Item})
					case r.DeleteRequest != nil:
						add(keyed{TableName: table, Key: r.DeleteRequest.Key})
					}
				}
			}
		}
	default:
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*readShape
	for _, ref := range refs {
		for _, s := range c.shapes[ref] {
			out = append(out, s)
		}
	}
	return out
}

// refresh asks the engine each read of shapes again and records the answers (the
// states a write just left).
func (p *Proxy) refresh(shapes []*readShape) {
	window := p.inj.faults.Load().StaleFor
	for _, s := range shapes {
		p.late.Add(1)
		go func() {
			defer p.late.Done()
			sent := time.Now()
			resp, b, err := p.direct("/", s.header, s.body)
			if err == nil && resp.StatusCode == http.StatusOK && len(b) <= maxCaptured {
				p.inj.stale.record(s, sent, resp.Header, b, window)
			} else {
				p.inj.stale.forget(s, sent)
			}
		}()
	}
}

// afterWrite records the states a write request left, if it is one and the stale-read
// fault is on.
func (p *Proxy) afterWrite(target string, body []byte) {
	if p.inj.faults.Load().Rates[KindStaleRead] <= 0 {
		return
	}
	select {
	case <-p.closing:
		return
	default:
	}
	if shapes := p.inj.stale.written(target, body); len(shapes) > 0 {
		p.refresh(shapes)
	}
}

// serveStale answers the read s with one of its answers of the last StaleFor, if the
// draw says so and there is one.
func (inj *injector) serveStale(w http.ResponseWriter, s *readShape) bool {
	f := inj.faults.Load()
	if f.Rates[KindStaleRead] <= 0 {
		return false
	}
	recent := inj.stale.recent(s, f.StaleFor)
	if len(recent) == 0 || !inj.decide(KindStaleRead) {
		return false
	}
	inj.mu.Lock()
	a := recent[inj.rng.IntN(len(recent))]
	inj.mu.Unlock()
	h := w.Header()
	for _, name := range []string{"Content-Type", "X-Amz-Crc32"} {
		if v := a.header.Get(name); v != "" {
			h.Set(name, v)
		}
	}
	h.Set("X-Amzn-Requestid", newID())
	h.Set("Content-Length", fmt.Sprint(len(a.body)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(a.body)
	return true
}
