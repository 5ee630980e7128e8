package rails

// For the external tests: build and parse rail-set keys.
var (
	AppendRailKey = appendRailKey
	ParseRailKey  = parseRailKey
)
