module example.com/fix/b

go 1.26.0

require example.com/fix v0.0.0-00010101000000-000000000000
