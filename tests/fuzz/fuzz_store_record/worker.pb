2
w-00000000f022lab-1:
cpuGenuineIntelXeon"avx2(0€€8€€@jcpu-x86_64-avx2 *alive0€Ð•ÿ¼18	Blab-1