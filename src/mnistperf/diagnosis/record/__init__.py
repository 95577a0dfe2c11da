"""What the measures become: the epochs' rows, the run's summary and verdict, what a fix could buy, the noise."""
