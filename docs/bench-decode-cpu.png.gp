set terminal pngcairo size 1000,650
set output 'docs/bench-decode-cpu.png'
set title 'bench decode: measured TPOT (solid) vs predicted floor (dashed), Intel(R) Xeon(R) Processor'
set xlabel 'batch'
set ylabel 'ms per decode step'
set logscale xy
set key outside right
set grid
plot 'docs/bench-decode-cpu.png.dat' index 0 using 1:2 with linespoints lw 2 lc 1 title 'mha 1K', '' index 0 using 1:3 with lines dt 2 lc 1 notitle, 'docs/bench-decode-cpu.png.dat' index 1 using 1:2 with linespoints lw 2 lc 2 title 'mha 8K', '' index 1 using 1:3 with lines dt 2 lc 2 notitle, 'docs/bench-decode-cpu.png.dat' index 2 using 1:2 with linespoints lw 2 lc 3 title 'gqa8 1K', '' index 2 using 1:3 with lines dt 2 lc 3 notitle, 'docs/bench-decode-cpu.png.dat' index 3 using 1:2 with linespoints lw 2 lc 4 title 'gqa8 8K', '' index 3 using 1:3 with lines dt 2 lc 4 notitle, 'docs/bench-decode-cpu.png.dat' index 4 using 1:2 with linespoints lw 2 lc 5 title 'mqa 1K', '' index 4 using 1:3 with lines dt 2 lc 5 notitle, 'docs/bench-decode-cpu.png.dat' index 5 using 1:2 with linespoints lw 2 lc 6 title 'mqa 8K', '' index 5 using 1:3 with lines dt 2 lc 6 notitle, 'docs/bench-decode-cpu.png.dat' index 6 using 1:2 with linespoints lw 2 lc 7 title 'mla 1K', '' index 6 using 1:3 with lines dt 2 lc 7 notitle, 'docs/bench-decode-cpu.png.dat' index 7 using 1:2 with linespoints lw 2 lc 8 title 'mla 8K', '' index 7 using 1:3 with lines dt 2 lc 8 notitle
