"""The analytical CrossFlow model: pure, vectorised functions of specs."""
