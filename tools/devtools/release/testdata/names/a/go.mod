module example.com/n/a

go 1.26.0
