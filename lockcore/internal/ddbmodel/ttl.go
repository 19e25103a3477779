package ddbmodel

import (
	"math/big"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ttlHorizon is how far in the past a TTL value may lie and still expire the item:
// DynamoDB ignores expiry times more than five years old.
const ttlHorizon = 5 * 365 * 24 * time.Hour

// ExpireTTL deletes, as DynamoDB's TTL process does, every item whose attribute attr is
// a number of epoch seconds before now (and not more than five years before), and
// returns the deleted items in key order. The deletions are one write. DynamoDB runs
// this in the background, some time after expiry; the simulator calls it when it
// chooses, so the model stays deterministic.
func (t *Table) ExpireTTL(now time.Time, attr string) []Item {
	t.db.mu.Lock()
	defer t.db.mu.Unlock()
	nowD := decimal{unscaled: big.NewInt(now.UnixNano()), exp: -9}
	oldest := now.Add(-ttlHorizon)
	oldD := decimal{unscaled: big.NewInt(oldest.UnixNano()), exp: -9}
	var gone []Item
	for _, pk := range sortedKeys(t.parts) {
		p := t.parts[pk]
		for _, sk := range p.sks {
			it := p.recs[sk].latest()
			if it == nil {
				continue
			}
			v, ok := it[attr].(*types.AttributeValueMemberN)
			if !ok {
				continue
			}
			d := mustNumber(v.Value)
			if d.cmp(nowD) < 0 && d.cmp(oldD) >= 0 {
				gone = append(gone, it)
			}
		}
	}
	if len(gone) == 0 {
		return nil
	}
	t.db.seq++
	out := make([]Item, len(gone))
	for i, it := range gone {
		t.write(t.keyItem(it), nil, t.db.seq)
		out[i] = cloneItem(it)
	}
	return out
}
