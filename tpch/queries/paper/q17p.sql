-- Q17': TPC-H Q17's join graph (part -> lineitem, with the correlated average quantity per
-- part): the brand and container conditions become a range of the part key (clustering
-- index): 0.5 % of parts at any scale factor ({sf} is replaced by the scale factor).
-- driving-table: part
-- driving-predicate: p_partkey <= CAST(1000 * {sf} AS BIGINT)
SELECT SUM(l_extendedprice) / 7.0 AS avg_yearly
FROM lineitem, part
WHERE p_partkey = l_partkey
  AND p_partkey <= CAST(1000 * {sf} AS BIGINT)
  AND l_quantity < (SELECT 0.2 * AVG(l_quantity) FROM lineitem WHERE l_partkey = p_partkey)
