package rails

import "github.com/velo-go/velo/velo/internal/wire"

// For the external tests: build rail-set keys.
var AppendRailKey = wire.AppendRailKey
