module example.com/n

go 1.26.0
