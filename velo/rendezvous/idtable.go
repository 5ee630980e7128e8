package rendezvous

// idTable holds the entries the store numbers itself, slots and leases, by ID. IDs come from a
// counter, so the live ones sit in runs, and a batch touches hundreds of neighbours one after the
// other. A map of tens of thousands of entries spends such a batch in cache misses on its groups;
// here an ID's page (idPageSize neighbouring IDs) is found in a small map, the page last used is
// kept at hand, and the entry is an index into the page. A page goes when its last entry does, so
// a table costs at most one page per live entry when the live IDs are far apart.
type idTable[T any] struct {
	pages map[uint64]*idPage[T]
	last  *idPage[T] // the page numbered lastN, or nil
	lastN uint64
	n     int
}

const (
	idPageBits = 6
	idPageSize = 1 << idPageBits
)

type idPage[T any] struct {
	live    int
	entries [idPageSize]*T
}

func (t *idTable[T]) page(id uint64) *idPage[T] {
	n := id >> idPageBits
	if t.last != nil && t.lastN == n {
		return t.last
	}
	p := t.pages[n]
	if p != nil {
		t.last, t.lastN = p, n
	}
	return p
}

// get is the entry of id, or nil.
func (t *idTable[T]) get(id uint64) *T {
	if p := t.page(id); p != nil {
		return p.entries[id&(idPageSize-1)]
	}
	return nil
}

// put sets id's entry to v (not nil).
func (t *idTable[T]) put(id uint64, v *T) {
	p := t.page(id)
	if p == nil {
		if t.pages == nil {
			t.pages = map[uint64]*idPage[T]{}
		}
		p = &idPage[T]{}
		t.pages[id>>idPageBits] = p
		t.last, t.lastN = p, id>>idPageBits
	}
	e := &p.entries[id&(idPageSize-1)]
	if *e == nil {
		p.live++
		t.n++
	}
	*e = v
}

// del removes id's entry, if any.
func (t *idTable[T]) del(id uint64) {
	p := t.page(id)
	if p == nil {
		return
	}
	e := &p.entries[id&(idPageSize-1)]
	if *e == nil {
		return
	}
	*e = nil
	p.live--
	t.n--
	if p.live == 0 {
		delete(t.pages, id>>idPageBits)
		if t.last == p {
			t.last = nil
		}
	}
}

// len is the number of entries.
func (t *idTable[T]) len() int { return t.n }

// each calls f on every entry, in no particular order. f may delete entries, its own or others'
// (a deleted entry not yet visited is not visited); entries it adds may or may not be visited.
func (t *idTable[T]) each(f func(*T)) {
	keys := make([]uint64, 0, len(t.pages))
	for k := range t.pages {
		keys = append(keys, k)
	}
	for _, k := range keys {
		p := t.pages[k]
		if p == nil {
			continue
		}
		for i := range p.entries {
			if v := p.entries[i]; v != nil {
				f(v)
			}
		}
	}
}
