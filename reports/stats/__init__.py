"""Computing the paired report's statistics (DESIGN section 6); nothing here renders.

(Placeholder: the steps to add a statistic follow in a later commit.)
"""
